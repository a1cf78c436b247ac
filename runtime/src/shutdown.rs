//! Graceful shutdown: SIGINT or SIGTERM (what Kubernetes sends before killing a pod)
//! cancels a token; every long-running loop selects on it and stops taking new work.

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// A cloneable stop signal. Cancelling it cancels every [`Shutdown::child`] too.
#[derive(Debug, Clone, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    /// A signal nothing has triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A signal triggered by the process's first SIGINT or SIGTERM (must be called inside
    /// a tokio runtime). A second one ends the process at once, so a stuck shutdown can
    /// still be interrupted.
    pub fn on_signals() -> std::io::Result<Self> {
        let shutdown = Self::new();
        let stop = shutdown.clone();
        let mut signals = Signals::new()?;
        tokio::spawn(async move {
            let name = signals.next().await;
            tracing::info!(signal = name, "stopping");
            stop.trigger();
            let name = signals.next().await;
            tracing::warn!(signal = name, "stopping now");
            std::process::exit(130);
        });
        Ok(shutdown)
    }

    /// Triggers the signal (idempotent).
    pub fn trigger(&self) {
        self.0.cancel();
    }

    /// Whether it was triggered.
    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves once triggered.
    pub async fn triggered(&self) {
        self.0.cancelled().await;
    }

    /// A signal triggered with this one, or on its own (a leadership term that ends while
    /// the process goes on).
    pub fn child(&self) -> Self {
        Self(self.0.child_token())
    }

    /// Runs `work` until it ends or the signal is triggered: `None` when stopped.
    pub async fn run_until<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            v = work => Some(v),
            () = self.triggered() => None,
        }
    }
}

/// The process's SIGINT and SIGTERM.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The name of the next signal received.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn children_stop_with_their_parent_but_not_the_reverse() {
        let root = Shutdown::new();
        let term = root.child();
        term.trigger();
        assert!(term.is_triggered() && !root.is_triggered());
        let other = root.child();
        let pending = root.run_until(std::future::pending::<()>());
        root.trigger();
        assert_eq!(pending.await, None);
        assert!(other.is_triggered());
        assert_eq!(Shutdown::new().run_until(async { 7 }).await, Some(7));
    }

    #[tokio::test]
    async fn sigterm_triggers_it() {
        let shutdown = Shutdown::on_signals().expect("signal handlers");
        // Sent with `kill`, as an operator (or the kubelet) would.
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        tokio::time::timeout(std::time::Duration::from_secs(10), shutdown.triggered())
            .await
            .expect("triggered by SIGTERM");
    }
}
