//! Tracing setup: an `RUST_LOG`-style filter and text or JSON lines on stdout.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The logging flags every binary takes (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// Log line format; the level filter comes from RUST_LOG.
    #[arg(long, env = "MERIDIAN_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
}

/// Installs the process's subscriber. The filter is `RUST_LOG` when set and valid, else
/// `default_filter` (`info`, `warn`, `fed_scheduler=debug,info`). Installing twice keeps
/// the first (tests and benches may start several components in one process).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if installed.is_err() {
        tracing::debug!("a tracing subscriber was already installed");
    }
}
