//! Feeds the routing core from this member's API: the lb-agent ConfigMap, the local
//! EndpointSlices and the `kubernetes.io/tls` Secrets (certificates for Services that
//! terminate TLS at the agent). Watch errors are retried with back-off while the last
//! inputs stay in force; a bad configuration is reported and the last good one kept.

use std::collections::HashMap;
use std::sync::Arc;

use fed_api::names::{LB_AGENT_CONFIG_KEY, LB_AGENT_CONFIGMAP, SYSTEM_NAMESPACE};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::inputs::{Inputs, TlsSecrets, local_endpoints, parse_config, tls_pair};

#[derive(Default)]
struct State {
    config_listed: bool,
    slices_listed: bool,
    slices: HashMap<(String, String), EndpointSlice>,
    init_slices: HashMap<(String, String), EndpointSlice>,
    secrets: TlsSecrets,
    init_secrets: TlsSecrets,
    config_seen_in_init: bool,
}

fn slice_key(s: &EndpointSlice) -> (String, String) {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

/// Applies one ConfigMap to the inputs: a good configuration replaces the current one, a
/// bad one only sets the error.
pub fn apply_configmap(inputs: &mut Inputs, cm: Option<&ConfigMap>, me: &str) {
    let result = match cm {
        None => Err(format!(
            "ConfigMap {SYSTEM_NAMESPACE}/{LB_AGENT_CONFIGMAP} not found"
        )),
        Some(cm) => parse_config(
            cm.data
                .as_ref()
                .and_then(|d| d.get(LB_AGENT_CONFIG_KEY))
                .map(String::as_str),
            me,
        )
        .map_err(|e| e.to_string()),
    };
    match result {
        Ok(config) => {
            if inputs.config.as_deref() != Some(&config) {
                inputs.config = Some(Arc::new(config));
            }
            inputs.config_error = None;
        }
        Err(e) => inputs.config_error = Some(e),
    }
}

/// Watches until the task is dropped, publishing every change on `tx`.
pub async fn run(client: kube::Client, cluster: String, tx: watch::Sender<Inputs>) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::all(client);
    let mut cm_events = watcher::watcher(
        cms,
        watcher::Config::default().fields(&format!("metadata.name={LB_AGENT_CONFIGMAP}")),
    )
    .default_backoff()
    .boxed();
    let mut slice_events = watcher::watcher(slices, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut secret_events = watcher::watcher(
        secrets,
        watcher::Config::default().fields("type=kubernetes.io/tls"),
    )
    .default_backoff()
    .boxed();
    let mut state = State::default();
    loop {
        tokio::select! {
            Some(ev) = cm_events.next() => match ev {
                Ok(ev) => on_configmap(&mut state, ev, &cluster, &tx),
                Err(error) => tracing::warn!(%error, "watching the lb-agent ConfigMap; keeping the current configuration"),
            },
            Some(ev) = slice_events.next() => match ev {
                Ok(ev) => on_slice(&mut state, ev, &tx),
                Err(error) => tracing::warn!(%error, "watching EndpointSlices; keeping the current endpoints"),
            },
            Some(ev) = secret_events.next() => match ev {
                Ok(ev) => on_secret(&mut state, ev, &tx),
                Err(error) => tracing::warn!(%error, "watching TLS Secrets; keeping the current certificates"),
            },
            else => return,
        }
    }
}

fn on_configmap(state: &mut State, ev: Event<ConfigMap>, me: &str, tx: &watch::Sender<Inputs>) {
    let cm = match ev {
        Event::Init => {
            state.config_seen_in_init = false;
            return;
        }
        Event::InitApply(cm) => {
            state.config_seen_in_init = true;
            Some(cm)
        }
        Event::InitDone => {
            state.config_listed = true;
            if state.config_seen_in_init {
                publish_synced(state, tx);
                return;
            }
            None
        }
        Event::Apply(cm) => Some(cm),
        Event::Delete(_) => None,
    };
    tx.send_modify(|inputs| {
        apply_configmap(inputs, cm.as_ref(), me);
        inputs.synced = state.config_listed && state.slices_listed;
    });
}

fn on_slice(state: &mut State, ev: Event<EndpointSlice>, tx: &watch::Sender<Inputs>) {
    match ev {
        Event::Init => {
            state.init_slices.clear();
            return;
        }
        Event::InitApply(s) => {
            state.init_slices.insert(slice_key(&s), s);
            return;
        }
        Event::InitDone => {
            state.slices = std::mem::take(&mut state.init_slices);
            state.slices_listed = true;
        }
        Event::Apply(s) => {
            state.slices.insert(slice_key(&s), s);
        }
        Event::Delete(s) => {
            state.slices.remove(&slice_key(&s));
        }
    }
    let local = Arc::new(local_endpoints(state.slices.values()));
    tx.send_if_modified(|inputs| {
        let synced = state.config_listed && state.slices_listed;
        if *inputs.local == *local && inputs.synced == synced {
            return false;
        }
        inputs.local = local;
        inputs.synced = synced;
        true
    });
}

fn on_secret(state: &mut State, ev: Event<Secret>, tx: &watch::Sender<Inputs>) {
    let key = |s: &Secret| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        )
    };
    match ev {
        Event::Init => {
            state.init_secrets.clear();
            return;
        }
        Event::InitApply(s) => {
            if let Some((k, pair)) = tls_pair(&s) {
                state.init_secrets.insert(k, pair);
            }
            return;
        }
        Event::InitDone => state.secrets = std::mem::take(&mut state.init_secrets),
        Event::Apply(s) => match tls_pair(&s) {
            Some((k, pair)) => {
                state.secrets.insert(k, pair);
            }
            None => {
                state.secrets.remove(&key(&s));
            }
        },
        Event::Delete(s) => {
            state.secrets.remove(&key(&s));
        }
    }
    let secrets = Arc::new(state.secrets.clone());
    tx.send_if_modified(|inputs| {
        if *inputs.tls == *secrets {
            return false;
        }
        inputs.tls = secrets;
        true
    });
}

fn publish_synced(state: &State, tx: &watch::Sender<Inputs>) {
    tx.send_if_modified(|inputs| {
        let synced = state.config_listed && state.slices_listed;
        let changed = inputs.synced != synced;
        inputs.synced = synced;
        changed
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(json: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(LB_AGENT_CONFIG_KEY.to_string(), json.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn bad_configuration_keeps_the_last_good_one() {
        let mut inputs = Inputs::default();
        apply_configmap(
            &mut inputs,
            Some(&cm(r#"{"dnsZone":"g.test","cluster":"a"}"#)),
            "a",
        );
        assert!(inputs.config.is_some() && inputs.config_error.is_none());
        apply_configmap(&mut inputs, Some(&cm("{oops")), "a");
        assert_eq!(inputs.config.as_ref().unwrap().dns_zone, "g.test");
        assert!(inputs.config_error.as_ref().unwrap().contains("parse"));
        apply_configmap(&mut inputs, None, "a");
        assert!(inputs.config.is_some());
        assert!(inputs.config_error.as_ref().unwrap().contains("not found"));
        apply_configmap(
            &mut inputs,
            Some(&cm(r#"{"dnsZone":"h.test","cluster":"a"}"#)),
            "a",
        );
        assert_eq!(inputs.config.as_ref().unwrap().dns_zone, "h.test");
        assert!(inputs.config_error.is_none());
    }
}
