//! The write gate: the one place a replica's writes pass, open only while it leads.
//!
//! A [`Gate`] sits in the API clients a component writes through (a tower layer under
//! `kube::Client`, [`Gate::layer`] and [`Gate::client`]), so no write path can forget to
//! ask: every request but GET/HEAD/OPTIONS is admitted only while this replica holds a
//! term whose deadline (its last successful renewal's start + renew deadline) is still
//! ahead on the local monotonic clock. The clock is read at each admission, so a process
//! that was frozen past its deadline (a long pause, a stopped VM) refuses its queued writes
//! before the elector has even run again. Writes in flight when a term ends are abandoned
//! (their callers get [`NotLeading`]); a write already on the wire may still land, which
//! is what the margin between the renew deadline and the lease duration is for.
//!
//! Reads pass always: a standby keeps its caches warm through the same client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::ElectionMetrics;
use crate::endpoints::{Readiness, Ready};
use crate::sync::lock;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the gate refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotLeading {
    /// This replica does not hold the leader Lease (yet, or any more).
    #[error("not the leader: this replica does not hold the leader Lease")]
    NotLeader,
    /// The term ended while the write was in flight; it was abandoned.
    #[error("not the leader: leadership ended while the write was in flight")]
    TermEnded,
}

impl NotLeading {
    /// Whether a kube error is a write this gate refused (so a caller can tell "not
    /// leading" from a failure of the API).
    pub fn is(e: &kube::Error) -> bool {
        matches!(e, kube::Error::Service(b) if b.downcast_ref::<NotLeading>().is_some())
    }
}

/// What this replica is in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Leader election is off: this replica writes from the start.
    Unelected,
    /// Waiting for the Lease; `leader` is who holds it, when known.
    Candidate {
        /// The current holder.
        leader: Option<String>,
    },
    /// Holds the Lease.
    Leading,
    /// Its term ended (lost, or released on shutdown): it writes nothing more.
    Stopped,
}

#[derive(Debug)]
enum State {
    /// No election: everything passes.
    Open,
    /// Not leading: writes are refused.
    Closed,
    /// Leading until `deadline` unless `ended` fires first.
    Leading {
        deadline: Instant,
        ended: CancellationToken,
    },
}

#[derive(Debug)]
struct Inner {
    /// The Lease's name (the metric's label).
    name: String,
    state: std::sync::Mutex<State>,
    role: watch::Sender<Role>,
    in_flight: AtomicUsize,
    idle: Notify,
    metrics: ElectionMetrics,
}

/// The write gate of one process; clones share it.
#[derive(Debug, Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

impl Gate {
    fn with(name: &str, state: State, role: Role, metrics: ElectionMetrics) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: name.to_string(),
                state: std::sync::Mutex::new(state),
                role: watch::channel(role).0,
                in_flight: AtomicUsize::new(0),
                idle: Notify::new(),
                metrics,
            }),
        }
    }

    /// A gate that admits everything: leader election is off.
    pub fn unelected(metrics: ElectionMetrics) -> Self {
        Self::with("", State::Open, Role::Unelected, metrics)
    }

    /// A closed gate for a candidate of the election of Lease `name`.
    pub fn candidate(name: &str, metrics: ElectionMetrics) -> Self {
        metrics.leading(name, false);
        Self::with(
            name,
            State::Closed,
            Role::Candidate { leader: None },
            metrics,
        )
    }

    /// What this replica is now.
    pub fn role(&self) -> Role {
        self.inner.role.borrow().clone()
    }

    /// Follows the role as it changes.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.inner.role.subscribe()
    }

    /// Resolves once this replica may write (it leads, or there is no election). A
    /// component starts its writing loops after this; reads and caches may run before.
    pub async fn leading(&self) {
        let mut rx = self.inner.role.subscribe();
        // The sender lives as long as `self`, so this only ends by the predicate.
        let _ = rx
            .wait_for(|r| matches!(r, Role::Leading | Role::Unelected))
            .await;
    }

    /// Admits one write now, or says why not. The permit bounds the write by the term.
    pub fn admit(&self, target: &'static str) -> Result<Permit, NotLeading> {
        let state = lock(&self.inner.state);
        let ended = match &*state {
            State::Open => None,
            State::Leading { deadline, ended }
                if Instant::now() < *deadline && !ended.is_cancelled() =>
            {
                Some(ended.clone())
            }
            State::Leading { .. } | State::Closed => {
                drop(state);
                self.inner.metrics.write(target, false);
                return Err(NotLeading::NotLeader);
            }
        };
        drop(state);
        self.inner.metrics.write(target, true);
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(Permit {
            ended,
            inner: self.inner.clone(),
        })
    }

    /// A tower layer gating the writes of a client's service stack; `target` labels the
    /// counts (`federation`, `member`).
    pub fn layer(&self, target: &'static str) -> GateLayer {
        GateLayer {
            gate: self.clone(),
            target,
        }
    }

    /// `client` with its writes gated (its errors unchanged; a refused write is a
    /// `kube::Error::Service` holding [`NotLeading`]).
    pub fn client(&self, client: kube::Client, target: &'static str) -> kube::Client {
        let namespace = client.default_namespace().to_string();
        kube::Client::new(
            tower_layer::Layer::layer(&self.layer(target), Whole(client)),
            namespace,
        )
    }

    /// A term begins: writes pass until `deadline`.
    pub(super) fn begin(&self, deadline: Instant) {
        *lock(&self.inner.state) = State::Leading {
            deadline,
            ended: CancellationToken::new(),
        };
        self.inner.metrics.leading(&self.inner.name, true);
        self.inner.role.send_replace(Role::Leading);
    }

    /// A renewal moved the term's deadline.
    pub(super) fn extend(&self, to: Instant) {
        if let State::Leading { deadline, .. } = &mut *lock(&self.inner.state) {
            *deadline = to;
        }
    }

    /// A candidate saw who holds the Lease.
    pub(super) fn saw_leader(&self, leader: Option<&str>) {
        let role = Role::Candidate {
            leader: leader.filter(|l| !l.is_empty()).map(str::to_string),
        };
        self.inner.role.send_if_modified(|r| {
            let changed = matches!(r, Role::Candidate { .. }) && *r != role;
            if changed {
                *r = role;
            }
            changed
        });
    }

    /// The term ends now: nothing more is admitted and writes in flight are abandoned.
    pub(super) fn end(&self) {
        let old = std::mem::replace(&mut *lock(&self.inner.state), State::Closed);
        if let State::Leading { ended, .. } = old {
            ended.cancel();
        }
        self.stopped();
    }

    /// The term ends on shutdown: nothing more is admitted, and writes in flight get up
    /// to `drain` to be answered (so none lands after the Lease is released), then are
    /// abandoned.
    pub(super) async fn close(&self, drain: Duration) {
        let ended = match &*lock(&self.inner.state) {
            State::Leading { ended, .. } => Some(ended.clone()),
            _ => None,
        };
        if let Some(ended) = &ended {
            // Refuse new writes but keep the token until the drain is over.
            *lock(&self.inner.state) = State::Leading {
                deadline: Instant::now(),
                ended: ended.clone(),
            };
            let idle = async {
                loop {
                    let notified = self.inner.idle.notified();
                    if self.inner.in_flight.load(Ordering::Acquire) == 0 {
                        return;
                    }
                    notified.await;
                }
            };
            let _ = tokio::time::timeout(drain, idle).await;
        }
        self.end();
    }

    fn stopped(&self) {
        if !self.inner.name.is_empty() {
            self.inner.metrics.leading(&self.inner.name, false);
        }
        self.inner.role.send_if_modified(|r| {
            let changed = *r != Role::Stopped && *r != Role::Unelected;
            if changed {
                *r = Role::Stopped;
            }
            changed
        });
    }

    /// Readiness saying whether this replica leads: a standby is ready (it serves nothing,
    /// and a rolling update must not wait for a Lease the old replica holds); a leader is
    /// ready when `inner` is (its loops synced); a replica whose term ended is not.
    pub fn readiness<R: Readiness>(&self, inner: R) -> LeaderReadiness<R> {
        LeaderReadiness {
            gate: self.clone(),
            inner,
        }
    }
}

/// Leave to write until the term ends; counted as in flight until dropped.
#[derive(Debug)]
pub struct Permit {
    ended: Option<CancellationToken>,
    inner: Arc<Inner>,
}

impl Permit {
    /// Runs `write`, abandoning it if the term ends first.
    pub async fn run<T, E: Into<BoxError>>(
        self,
        write: impl Future<Output = Result<T, E>>,
    ) -> Result<T, BoxError> {
        match &self.ended {
            None => write.await.map_err(Into::into),
            Some(ended) => tokio::select! {
                r = write => r.map_err(Into::into),
                () = ended.cancelled() => Err(Box::new(NotLeading::TermEnded)),
            },
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.inner.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.idle.notify_waiters();
        }
    }
}

/// Reads pass the gate; everything else is a write.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A tower layer putting a [`Gate`] in front of a service.
#[derive(Debug, Clone)]
pub struct GateLayer {
    gate: Gate,
    target: &'static str,
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = GateService<S>;
    fn layer(&self, inner: S) -> GateService<S> {
        GateService {
            inner,
            gate: self.gate.clone(),
            target: self.target,
        }
    }
}

/// A service whose writes pass a [`Gate`].
#[derive(Debug, Clone)]
pub struct GateService<S> {
    inner: S,
    gate: Gate,
    target: &'static str,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, B> tower_service::Service<Request<B>> for GateService<S>
where
    S: tower_service::Service<Request<B>>,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if !is_write(req.method()) {
            let call = self.inner.call(req);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        match self.gate.admit(self.target) {
            Err(e) => Box::pin(std::future::ready(Err(Box::new(e) as BoxError))),
            Ok(permit) => {
                let call = self.inner.call(req);
                Box::pin(permit.run(call))
            }
        }
    }
}

/// A whole kube client as a service, so a gate can go in front of a client built
/// elsewhere. Its errors are `kube::Error`s, which the outer client hands back unchanged.
#[derive(Clone)]
struct Whole(kube::Client);

impl tower_service::Service<Request<kube::client::Body>> for Whole {
    type Response = Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(req).await })
    }
}

/// `/readyz` with the replica's role in it (see [`Gate::readiness`]).
pub struct LeaderReadiness<R> {
    gate: Gate,
    inner: R,
}

impl<R: Readiness> Readiness for LeaderReadiness<R> {
    fn ready(&self) -> Ready {
        match self.gate.role() {
            Role::Unelected => self.inner.ready(),
            Role::Leading => {
                let r = self.inner.ready();
                if !r.ready {
                    return r;
                }
                Ready {
                    ready: true,
                    message: Some(match r.message {
                        Some(m) => format!("leading; {m}"),
                        None => "leading".into(),
                    }),
                }
            }
            Role::Candidate { leader } => Ready {
                ready: true,
                message: Some(match leader {
                    Some(l) => format!("standby; the leader is {l}"),
                    None => "standby; no leader seen yet".into(),
                }),
            },
            Role::Stopped => Ready {
                ready: false,
                message: Some("leadership ended; stopping".into()),
            },
        }
    }
}
