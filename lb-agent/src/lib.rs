//! Meridian's per-member-cluster load balancer: routes HTTP by Host and proxies each
//! federated Service port (HTTP, h2c, TCP) to local ready endpoints first and healthy
//! remote lb-agents second, answers peers, and answers DNS for the federation zone with
//! the clusters that serve each Service. See docs/traffic.md.

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
pub mod serving;
pub mod source;
pub mod static_inputs;
pub mod status;
pub mod table;
pub mod tcp;
pub mod upstream;

pub use agent::{Agent, Settings, Status};
pub use inputs::Inputs;
pub use serving::{Serving, ServingView};
