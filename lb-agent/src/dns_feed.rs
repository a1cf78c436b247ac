//! Runs the DNS responder on the agent's serving view: every change of which cluster
//! serves which Service (configuration, health checks, local endpoints) becomes a new
//! [`DnsView`]; a configuration the DNS side rejects is reported and the last good view
//! keeps answering.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dns::{DnsMetrics, DnsView, ServeOptions, serve_tcp, serve_udp};
use crate::metrics::Metrics;
use crate::serving::{Serving, ServingView};

/// The DNS view for a serving snapshot (None before the first configuration).
pub fn view_of(serving: &Serving) -> Option<Result<DnsView, crate::dns::DnsConfigError>> {
    let config = serving.config.as_ref()?;
    Some(DnsView::from_config(config, |cluster, ns, svc| {
        serving.serves(cluster, ns, svc)
    }))
}

/// Binds `udp_sockets` UDP sockets (`SO_REUSEPORT`, one serving task each: one per
/// runtime worker lets every core answer) and TCP on `addr` now (so a taken port fails the
/// start), then answers from the first good view on, following `serving`.
pub async fn start(
    addr: SocketAddr,
    udp_sockets: usize,
    serving: ServingView,
    metrics: Arc<Metrics>,
) -> std::io::Result<JoinHandle<()>> {
    let udp = crate::dns::bind_udp_sockets(addr, udp_sockets)?;
    let tcp = TcpListener::bind(addr).await?;
    Ok(tokio::spawn(run(udp, tcp, serving.subscribe(), metrics)))
}

async fn run(
    udp: Vec<UdpSocket>,
    tcp: TcpListener,
    mut serving: watch::Receiver<Arc<Serving>>,
    metrics: Arc<Metrics>,
) {
    let mut views: Option<watch::Sender<Arc<DnsView>>> = None;
    let mut sockets = Some((udp, tcp));
    let mut tasks = Vec::new();
    loop {
        let snapshot = serving.borrow_and_update().clone();
        match view_of(&snapshot) {
            None => {}
            Some(Err(e)) => {
                metrics.config_errors.inc();
                tracing::warn!(error = %e, "DNS: configuration rejected; answering from the last good one");
            }
            Some(Ok(view)) => match &views {
                Some(tx) => {
                    tx.send_replace(Arc::new(view));
                }
                None => {
                    let (tx, rx) = watch::channel(Arc::new(view));
                    if let Some((udp, tcp)) = sockets.take() {
                        tasks.push(spawn_listeners(udp, tcp, rx, metrics.dns.clone()));
                    }
                    views = Some(tx);
                }
            },
        }
        if serving.changed().await.is_err() {
            break;
        }
    }
    // The agent is gone: keep answering from the last view until the process ends.
    for t in tasks {
        let _ = t.await;
    }
}

/// One task per UDP socket and one for TCP, so they run on different workers.
fn spawn_listeners(
    udp: Vec<UdpSocket>,
    tcp: TcpListener,
    rx: watch::Receiver<Arc<DnsView>>,
    metrics: DnsMetrics,
) -> JoinHandle<()> {
    let options = ServeOptions::default();
    let mut tasks: Vec<JoinHandle<()>> = udp
        .into_iter()
        .map(|s| tokio::spawn(serve_udp(s, rx.clone(), metrics.clone(), options.clone())))
        .collect();
    tasks.push(tokio::spawn(serve_tcp(tcp, rx, metrics, options)));
    tokio::spawn(async move {
        for t in tasks {
            let _ = t.await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fed_api::lbconfig::{LbCluster, LbConfig};

    #[test]
    fn no_view_before_a_configuration_and_errors_are_reported() {
        assert!(view_of(&Serving::default()).is_none());
        let mut bad = Serving::default();
        bad.config = Some(Arc::new(LbConfig {
            dns_zone: "global.test".into(),
            cluster: "a".into(),
            clusters: vec![LbCluster {
                name: "a".into(),
                address: "not-an-ip".into(),
                ..Default::default()
            }],
            ..Default::default()
        }));
        assert!(matches!(view_of(&bad), Some(Err(_))));
    }
}
