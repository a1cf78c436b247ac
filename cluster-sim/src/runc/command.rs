//! Running `runc` and `umoci` and reporting their failures as typed errors.

use std::process::Stdio;

use super::RuncError;

/// Runs `program args...` to completion; a non-zero exit is an error carrying its stderr.
pub(crate) async fn run(program: &str, args: &[&str]) -> Result<Vec<u8>, RuncError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| RuncError::Spawn {
            program: program.to_string(),
            source: e,
        })?;
    if !out.status.success() {
        return Err(RuncError::Failed {
            command: format!("{program} {}", args.join(" ")),
            status: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// Runs `program args...` synchronously, ignoring its outcome (for clean-up at exit, when
/// the async runtime may be gone).
pub(crate) fn run_blocking(program: &str, args: &[&str]) {
    let _ = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
