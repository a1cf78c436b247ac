//! History compaction shared by every API server replica on one etcd, as kube-apiserver does it.
//!
//! Each replica wakes up once per interval and tries a transaction on a shared key: "if the
//! key's version is still the one I saw last round, bump it". One replica per round wins and
//! compacts etcd to the revision it saw one round earlier, so at least one interval of history
//! is always kept; the others learn the key's new version and the current revision and try
//! again next round. No lock, no leader: replicas that come and go only change who wins.

use std::sync::Weak;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::Inner;
use super::errors::store_error;
use super::members::Retry;
use crate::Revision;

/// What a replica knows between rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Round {
    /// The compaction key's version when this replica last looked (its round counter).
    pub(crate) version: i64,
    /// The store revision this replica saw in its last round: the next winner's target.
    pub(crate) revision: Revision,
}

/// What this round's transaction found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The key still had the expected version: this replica bumped it.
    Won {
        /// The revision of the transaction.
        revision: Revision,
    },
    /// Another replica got there first.
    Lost {
        /// The key's version now.
        version: i64,
        /// The revision the transaction saw.
        revision: Revision,
    },
}

/// The next round's state, and the revision to compact to now, if any.
pub(crate) fn decide(round: Round, attempt: Attempt) -> (Round, Option<Revision>) {
    match attempt {
        Attempt::Won { revision } => {
            let next = Round {
                version: round.version + 1,
                revision,
            };
            // The first round only learns a revision: nothing is old enough yet.
            let target = (round.revision > 0).then_some(round.revision);
            (next, target)
        }
        Attempt::Lost { version, revision } => (Round { version, revision }, None),
    }
}

/// Runs rounds every `interval` until the store is dropped.
pub(crate) async fn run(inner: Weak<Inner>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; a round then would only learn the revision, as the
    // next one will.
    ticks.tick().await;
    let mut round = Round::default();
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        round = match one_round(&inner, round).await {
            Ok(next) => next,
            Err(err) => {
                tracing::warn!(error = %err, "etcd compaction round failed");
                round
            }
        };
    }
}

/// One round: the transaction, then the compaction if this replica won.
async fn one_round(inner: &Inner, round: Round) -> crate::Result<Round> {
    let key = inner.keys.key(super::keys::COMPACT_KEY);
    let txn = Txn::new()
        .when([Compare::version(
            key.clone(),
            CompareOp::Equal,
            round.version,
        )])
        // The value records the revision being compacted to, for people reading etcd.
        .and_then([TxnOp::put(key.clone(), round.revision.to_string(), None)])
        .or_else([TxnOp::get(key, None)]);
    let response = inner
        .members
        .call(Retry::IfNotSent, |mut member| {
            let txn = txn.clone();
            async move { member.kv.txn(txn).await }
        })
        .await
        .map_err(|err| store_error("compacting: bumping the compaction key", err))?;
    let revision = super::header_revision(response.header());
    let attempt = if response.succeeded() {
        inner.acknowledged(revision);
        Attempt::Won { revision }
    } else {
        let mut version = 0;
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                version = kv.version();
                // The winner compacts to the value it wrote; watches from before it will fail.
                if let Some(target) = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|v| v.parse::<Revision>().ok())
                {
                    inner.observe_compaction(target);
                }
            }
        }
        Attempt::Lost { version, revision }
    };
    let (next, target) = decide(round, attempt);
    if let Some(target) = target {
        inner.compact(target).await?;
        tracing::info!(revision = target, "compacted etcd history");
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_win_only_learns_a_revision() {
        let (next, target) = decide(Round::default(), Attempt::Won { revision: 40 });
        assert_eq!(
            next,
            Round {
                version: 1,
                revision: 40
            }
        );
        assert_eq!(target, None);
    }

    #[test]
    fn a_winner_compacts_to_the_revision_of_the_previous_round() {
        let round = Round {
            version: 3,
            revision: 40,
        };
        let (next, target) = decide(round, Attempt::Won { revision: 90 });
        assert_eq!(target, Some(40));
        assert_eq!(
            next,
            Round {
                version: 4,
                revision: 90
            }
        );
    }

    #[test]
    fn a_loser_adopts_the_version_and_compacts_nothing() {
        let round = Round {
            version: 1,
            revision: 40,
        };
        let (next, target) = decide(
            round,
            Attempt::Lost {
                version: 5,
                revision: 95,
            },
        );
        assert_eq!(target, None);
        assert_eq!(
            next,
            Round {
                version: 5,
                revision: 95
            }
        );
    }

    /// Two replicas whose rounds interleave: the key's version is the shared round counter,
    /// so exactly one of them compacts per round, whichever comes first.
    #[test]
    fn two_replicas_compact_once_per_round() {
        let mut key_version = 0;
        let mut revision = 10;
        let mut replicas = [Round::default(), Round::default()];
        let mut compactions = Vec::new();
        // In round 3 the second replica's timer fires first.
        let orders = [[0, 1], [0, 1], [1, 0], [0, 1], [0, 1]];
        for order in orders {
            let mut wins = 0;
            for replica in order {
                revision += 7;
                let attempt = if replicas[replica].version == key_version {
                    key_version += 1;
                    wins += 1;
                    Attempt::Won { revision }
                } else {
                    Attempt::Lost {
                        version: key_version,
                        revision,
                    }
                };
                let (next, target) = decide(replicas[replica], attempt);
                replicas[replica] = next;
                compactions.extend(target);
            }
            assert_eq!(wins, 1, "one winner per round");
        }
        assert_eq!(key_version, 5);
        // Every compaction targets a revision at least one round old, in increasing order.
        assert!(
            compactions.windows(2).all(|w| w[0] < w[1]),
            "{compactions:?}"
        );
        assert_eq!(compactions.len(), 4);
    }
}
