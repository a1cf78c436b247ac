//! What central hands a member for one object, and what a member remembers of its syncs.

/// The intent for one federated object in one member: what to hold (`W`, the controller's
/// own "present with these copies / absent"), for the owner with this uid.
#[derive(Clone, Debug, PartialEq)]
pub struct Intent<W> {
    /// The federated object's uid (owner-uid of the copies).
    pub uid: String,
    /// What to hold.
    pub want: W,
}

impl<W> Intent<W> {
    /// `want` for the owner with `uid`.
    pub fn new(uid: &str, want: W) -> Self {
        Self {
            uid: uid.to_string(),
            want,
        }
    }
}

/// A member's bookkeeping of one unit of work's syncs.
#[derive(Clone, Debug)]
pub struct Record<I> {
    /// The last sync's error ("" when fine), with its sources.
    pub error: String,
    /// Whether that error is a name conflict.
    pub conflict: bool,
    /// When the last sync succeeded.
    pub last_sync_time: Option<String>,
    /// The intent last converged, to tell a drift revert from a spec change.
    pub converged: Option<I>,
}

// Not derived: a derive would ask `I: Default`, which intents are not.
impl<I> Default for Record<I> {
    fn default() -> Self {
        Self {
            error: String::new(),
            conflict: false,
            last_sync_time: None,
            converged: None,
        }
    }
}
