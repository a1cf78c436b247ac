//! Meridian's per-member-cluster load balancer: routes HTTP by Host and TLS by SNI, and
//! proxies each federated Service port (HTTP, h2c, TLS, TCP, UDP) by its traffic policy —
//! local ready endpoints first and healthy remote lb-agents second by default — answers
//! peers, and answers DNS (A and SRV) for the federation zone with the clusters that serve
//! each Service. See docs/traffic.md.

pub mod agent;
pub mod backend;
pub mod balance;
pub mod cli;
pub mod dns;
pub mod dns_feed;
pub mod h1;
pub mod health;
pub mod http;
pub mod inputs;
pub mod metrics;
pub mod peer;
pub mod policy;
pub mod serving;
pub mod sni;
pub mod source;
pub mod static_inputs;
pub mod status;
pub mod table;
pub mod tcp;
pub mod terminate;
pub mod udp;
pub mod upstream;

pub use agent::{Agent, Settings, Status};
pub use inputs::Inputs;
pub use serving::{Serving, ServingView};
