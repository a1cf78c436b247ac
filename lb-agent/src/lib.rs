//! The per-member-cluster L4/L7 proxy and global DNS responder: filled by the "Cross-cluster traffic" issue.

pub mod dns;
