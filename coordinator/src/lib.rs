//! aloft-coordinator: the API server on the embedded store, and the controllers that run on it.
//!
//! Start reading at [`server`] (the Kubernetes-style API), [`store`] (the narrow storage
//! interface and its SQLite implementation) and [`controllers`] (reconcile loops fed by watches).

pub mod auth;
pub mod backup;
pub mod bench;
pub mod config_use;
pub mod controllers;
pub mod ctl;
pub mod fbc;
pub mod fleetlock;
pub mod fsutil;
pub mod health;
pub mod metrics;
pub mod notify;
pub mod process_metrics;
pub mod release_signature;
pub mod resources;
pub mod serve;
pub mod server;
pub mod store;
pub mod tls;
pub mod update_service;
mod value_visit;
pub mod yaml;
pub mod yaml_out;

/// The API client, re-exported: aloftctl and the tests use it through this crate.
pub use aloft_client as client;
