//! A fleet of simulated Kubernetes member clusters in one process: each cluster is the
//! `meridian-apiserver` engine with the member kinds over an in-memory store, served on its
//! own loopback port, plus simulated control loops (deployments, replica sets, stateful sets,
//! daemon sets, jobs, cron jobs, disruption budgets, scheduler, kubelets, endpoints, load
//! balancers, service-account tokens) and fault injection.

pub mod admin;
pub mod cli;
pub mod cluster;
pub mod controllers;
pub mod faults;
pub mod fleet;
pub mod kinds;
pub mod pod_status;
pub mod podnet;
pub mod runc;
pub mod runtime;
