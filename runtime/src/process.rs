//! How every Meridian binary starts: small pages, flags parsed, tracing on, the async
//! runtime built and SIGINT/SIGTERM turned into a [`Shutdown`], before its own `run`.

use std::future::Future;

use crate::shutdown::Shutdown;
use crate::telemetry::{self, LogFormat};

/// Why a process could not start its own work.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The tokio runtime could not be built.
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    /// SIGINT/SIGTERM handlers could not be installed.
    #[error("installing signal handlers")]
    Signals(#[source] std::io::Error),
}

/// Starts the process and runs `run` with its flags and shutdown token to its end: the
/// whole of a binary's `main` but its own wiring. Flags are parsed (or the process exits
/// with clap's usage message) before anything else; `log` reads the log format from them.
pub fn main<A, F, Fut, E>(log: impl FnOnce(&A) -> LogFormat, run: F) -> Result<(), E>
where
    A: clap::Parser,
    F: FnOnce(A, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<StartError>,
{
    // First: the kernel consults the switch at every page fault from here on.
    meridian_alloc::disable_huge_pages();
    let args = A::parse();
    let format = log(&args);
    start(args, format, run)
}

/// [`main`] from parsed flags: tracing on (the filter defaults to `info`), a
/// multi-threaded runtime, the signal handlers, then `run`.
pub fn start<A, F, Fut, E>(args: A, log: LogFormat, run: F) -> Result<(), E>
where
    F: FnOnce(A, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<StartError>,
{
    telemetry::init(log, "info");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    runtime.block_on(async move {
        // Signal handlers need the runtime's reactor.
        let shutdown = Shutdown::on_signals().map_err(StartError::Signals)?;
        run(args, shutdown).await
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Args {
        #[arg(long)]
        answer: u8,
    }

    #[derive(Debug, thiserror::Error)]
    enum Failed {
        #[error("start")]
        Start(#[from] StartError),
        #[error("work")]
        Work(u8),
    }

    #[test]
    fn runs_the_work_with_its_flags_and_returns_its_result() {
        let args = Args::try_parse_from(["test", "--answer", "7"]).expect("flags");
        let r = start(args, LogFormat::Text, |args: Args, shutdown| async move {
            assert!(!shutdown.is_triggered());
            Err::<(), _>(Failed::Work(args.answer))
        });
        assert!(matches!(r, Err(Failed::Work(7))), "{r:?}");
    }
}
