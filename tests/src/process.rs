//! Child processes for end-to-end tests and benchmarks: a binary started in its own process
//! group, its output kept in a file, waited for (a line it prints, a port that accepts) with a
//! deadline, and killed together with everything it started when dropped — so a failed run
//! leaves no server holding its addresses.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How many of the last lines a process printed an error quotes.
const QUOTED_LINES: usize = 5;
/// Pause between two connection attempts while waiting for a port.
const PORT_POLL: Duration = Duration::from_millis(20);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// How long an [`Spawn::interruptible`] process may take to exit on SIGTERM before it is
/// killed.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// Pause between two checks of whether a terminated process has exited.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// Why a process could not be started or did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The program is not where it was looked for.
    #[error("{} is missing: build it first ({hint})", .path.display())]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
        /// The build command that makes it.
        hint: String,
    },
    /// The output file could not be opened.
    #[error("opening {}", .path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("starting {program}")]
    Start {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// It exited (or closed its output) before becoming ready.
    #[error("{program} exited before {waiting_for}{}", quote(.last, .output))]
    Exited {
        /// The program.
        program: String,
        /// What readiness was awaited.
        waiting_for: String,
        /// Its last lines on stdout.
        last: Vec<String>,
        /// Where the rest of its output is.
        output: Option<PathBuf>,
    },
    /// It did not become ready in time (it is killed).
    #[error("{program}: no {waiting_for} within {within:?}{}", quote(.last, .output))]
    Timeout {
        /// The program.
        program: String,
        /// What readiness was awaited.
        waiting_for: String,
        /// The deadline.
        within: Duration,
        /// Its last lines on stdout.
        last: Vec<String>,
        /// Where the rest of its output is.
        output: Option<PathBuf>,
    },
}

fn quote(last: &[String], output: &Option<PathBuf>) -> String {
    let mut s = String::new();
    if !last.is_empty() {
        s.push_str("; last lines: ");
        s.push_str(&last.join(" | "));
    }
    if let Some(p) = output {
        s.push_str(&format!("; output in {}", p.display()));
    }
    s
}

/// The workspace binary `name` built beside the running executable: tests run from
/// `target/<profile>/deps/`, examples from `target/<profile>/examples/`, and both find the
/// binaries in `target/<profile>/`.
pub fn sibling_binary(name: &str) -> Result<PathBuf, ProcError> {
    let exe = std::env::current_exe().map_err(|source| ProcError::Start {
        program: name.to_owned(),
        source,
    })?;
    let profile_dir = exe.parent().and_then(Path::parent);
    let path = profile_dir.map_or_else(|| PathBuf::from(name), |d| d.join(name));
    if path.exists() {
        return Ok(path);
    }
    let release = profile_dir
        .and_then(Path::file_name)
        .is_some_and(|p| p == "release");
    let hint = if release {
        format!("cargo build --release -p {name}")
    } else {
        "cargo build --workspace --bins".to_owned()
    };
    Err(ProcError::Missing { path, hint })
}

/// What makes a spawned process ready.
#[derive(Debug, Clone)]
enum Ready {
    /// Nothing: it counts as ready once started.
    Started,
    /// A stdout line starting with this prefix, within the deadline.
    Line(String, Duration),
}

/// A process to start: the program, its arguments and environment, where its output goes
/// and what makes it ready.
#[derive(Debug)]
pub struct Spawn {
    cmd: Command,
    program: String,
    output: Option<PathBuf>,
    ready: Ready,
    own_group: bool,
}

impl Spawn {
    /// `program`, in its own process group.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        let program = program.as_ref();
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null());
        Self {
            cmd,
            program: Path::new(program)
                .file_name()
                .unwrap_or(program)
                .to_string_lossy()
                .into_owned(),
            output: None,
            ready: Ready::Started,
            own_group: true,
        }
    }

    /// Stays in the caller's process group instead of its own, for a program run from a
    /// terminal (the benchmarks): Ctrl-C there stops it together with the caller, which has
    /// no chance to drop it. Dropped, it gets SIGTERM (so a server such as nginx stops its
    /// workers) and SIGKILL if it is still running after a grace period.
    pub fn interruptible(mut self) -> Self {
        self.own_group = false;
        self
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// More arguments.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.cmd.args(args);
        self
    }

    /// An environment variable of the process.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Environment variables of the process.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.cmd.envs(vars);
        self
    }

    /// Appends stdout and stderr to `path`. Without it stdout is discarded (after the ready
    /// line) and stderr goes where this process's goes.
    pub fn output(mut self, path: impl Into<PathBuf>) -> Self {
        self.output = Some(path.into());
        self
    }

    /// Ready once stdout has a line starting with `prefix`; `spawn` fails when none comes
    /// `within` the deadline or the process exits first.
    pub fn ready_line(mut self, prefix: impl Into<String>, within: Duration) -> Self {
        self.ready = Ready::Line(prefix.into(), within);
        self
    }

    /// Starts the process and waits until it is ready.
    pub fn spawn(mut self) -> Result<Proc, ProcError> {
        let file = match &self.output {
            None => None,
            Some(path) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| ProcError::Output {
                        path: path.clone(),
                        source,
                    })?,
            ),
        };
        let copy = |f: &File| {
            f.try_clone().map_err(|source| ProcError::Output {
                path: self.output.clone().unwrap_or_default(),
                source,
            })
        };
        if self.own_group {
            self.cmd.process_group(0);
        }
        let waits = matches!(self.ready, Ready::Line(..));
        match (&file, waits) {
            (_, true) => self.cmd.stdout(Stdio::piped()),
            (Some(f), false) => self.cmd.stdout(copy(f)?),
            (None, false) => self.cmd.stdout(Stdio::null()),
        };
        if let Some(f) = &file {
            self.cmd.stderr(copy(f)?);
        }
        let mut child = self.cmd.spawn().map_err(|source| ProcError::Start {
            program: self.program.clone(),
            source,
        })?;
        let mut proc = Proc {
            stdout: child.stdout.take(),
            child,
            program: self.program,
            output: self.output,
            banner: Vec::new(),
            ready_prefix: None,
            own_group: self.own_group,
        };
        if let Ready::Line(prefix, within) = self.ready {
            proc.wait_for_line(&prefix, within, file)?;
            proc.ready_prefix = Some(prefix);
        }
        Ok(proc)
    }
}

/// A running child process, in its own process group unless started
/// [`interruptible`](Spawn::interruptible); dropping it stops it (and the group).
#[derive(Debug)]
pub struct Proc {
    child: Child,
    stdout: Option<ChildStdout>,
    program: String,
    output: Option<PathBuf>,
    /// The stdout lines up to and including the ready line.
    pub banner: Vec<String>,
    ready_prefix: Option<String>,
    own_group: bool,
}

impl Proc {
    /// Reads stdout until a line starting with `prefix`, then hands the rest of stdout to
    /// a thread that copies it to `file` (or drops it), so the process never blocks on a
    /// full pipe.
    fn wait_for_line(
        &mut self,
        prefix: &str,
        within: Duration,
        mut file: Option<File>,
    ) -> Result<(), ProcError> {
        let Some(stdout) = self.stdout.take() else {
            return Ok(());
        };
        let (tx, rx) = mpsc::channel::<String>();
        let watching = prefix.to_owned();
        std::thread::spawn(move || {
            let mut ready = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(f) = file.as_mut() {
                    // Losing a log line must not stop the drain that keeps the child going.
                    let _ = writeln!(f, "{line}");
                }
                if !ready {
                    ready = line.starts_with(&watching);
                    if tx.send(line).is_err() {
                        ready = true;
                    }
                }
            }
        });
        let deadline = Instant::now() + within;
        let waiting_for = format!("a line starting with {prefix:?}");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let done = line.starts_with(prefix);
                    self.banner.push(line);
                    if done {
                        return Ok(());
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.failed(waiting_for, None));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.failed(waiting_for, Some(within)));
                }
            }
        }
    }

    /// Kills the group (a process that exited may have left children) and says what was
    /// awaited: `Exited`, or `Timeout` after `within`.
    fn failed(&mut self, waiting_for: String, within: Option<Duration>) -> ProcError {
        self.kill();
        let from = self.banner.len().saturating_sub(QUOTED_LINES);
        let (program, last, output) = (
            self.program.clone(),
            self.banner[from..].to_vec(),
            self.output.clone(),
        );
        match within {
            None => ProcError::Exited {
                program,
                waiting_for,
                last,
                output,
            },
            Some(within) => ProcError::Timeout {
                program,
                waiting_for,
                within,
                last,
                output,
            },
        }
    }

    /// Waits until `addr` accepts a TCP connection, failing when the process exits first
    /// or the deadline passes (then the process is killed).
    pub fn wait_for_port(&mut self, addr: SocketAddr, within: Duration) -> Result<(), ProcError> {
        let deadline = Instant::now() + within;
        let waiting_for = format!("listener on {addr}");
        loop {
            if TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok() {
                return Ok(());
            }
            if !matches!(self.child.try_wait(), Ok(None)) {
                return Err(self.failed(waiting_for, None));
            }
            if Instant::now() >= deadline {
                return Err(self.failed(waiting_for, Some(within)));
            }
            std::thread::sleep(PORT_POLL);
        }
    }

    /// What the ready line says after its prefix, trimmed (`export KUBECONFIG=/k` → `/k`).
    pub fn ready_value(&self) -> Option<&str> {
        let prefix = self.ready_prefix.as_deref()?;
        Some(self.banner.last()?.strip_prefix(prefix)?.trim())
    }

    /// The process id (also its process group id, unless it is interruptible).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file its output is appended to, if one was given.
    pub fn output(&self) -> Option<&Path> {
        self.output.as_deref()
    }

    /// SIGTERM to the process (not its group), then waits for it to exit.
    pub fn terminate(&mut self) -> std::io::Result<ExitStatus> {
        signal("-TERM", &self.child.id().to_string());
        self.child.wait()
    }

    /// Sends `sig` (`STOP`, `CONT`, ...) to the process alone, not its group.
    pub fn signal(&self, sig: &str) {
        signal(&format!("-{sig}"), &self.child.id().to_string());
    }

    /// Its exit status once it has exited, waiting at most `within` (`None`: still
    /// running then).
    pub fn wait_exit(&mut self, within: Duration) -> std::io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(EXIT_POLL);
        }
    }

    /// Stops it and reaps it: SIGKILL to its whole process group, or, for an interruptible
    /// process (which shares the caller's group), SIGTERM and SIGKILL after a grace period.
    pub fn kill(&mut self) {
        if self.own_group {
            // The group id is the child's pid (`process_group(0)`).
            signal("-KILL", &format!("-{}", self.child.id()));
        } else if matches!(self.child.try_wait(), Ok(None)) {
            signal("-TERM", &self.child.id().to_string());
            let deadline = Instant::now() + TERM_GRACE;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(EXIT_POLL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kill <sig> -- <target>`: std has no signal API, and the workspace forbids `unsafe`.
fn signal(sig: &str, target: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", target])
        .stderr(Stdio::null())
        .status();
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn sh(script: &str) -> Spawn {
        Spawn::new("sh").args(["-c", script])
    }

    #[test]
    fn waits_for_the_ready_line_and_keeps_the_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("out.log");
        let mut p =
            sh("echo starting; echo oops >&2; echo 'ready at 1.2.3.4'; echo after; sleep 30")
                .output(&log)
                .ready_line("ready at", Duration::from_secs(10))
                .spawn()
                .expect("ready");
        assert_eq!(p.banner, ["starting", "ready at 1.2.3.4"]);
        assert_eq!(p.ready_value(), Some("1.2.3.4"));
        // The copy runs on after the ready line: poll for it with a deadline.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("after") {
                assert!(text.contains("oops") && text.contains("starting"), "{text}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "output never reached the file: {text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(p.output(), Some(log.as_path()));
        p.kill();
    }

    #[test]
    fn exiting_or_staying_silent_is_an_error_naming_what_was_awaited() {
        let err = sh("echo one; echo two; exit 3")
            .ready_line("ready", Duration::from_secs(10))
            .spawn()
            .expect_err("exits first");
        assert!(matches!(&err, ProcError::Exited { last, .. } if last == &["one", "two"]));
        assert!(
            err.to_string().contains("a line starting with \"ready\""),
            "{err}"
        );

        let started = Instant::now();
        let err = sh("echo waiting; sleep 30")
            .ready_line("ready", Duration::from_millis(300))
            .spawn()
            .expect_err("times out");
        assert!(matches!(err, ProcError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn dropping_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("grandchild.pid");
        let p = sh(&format!(
            "sleep 30 & echo $! > {}; echo up; wait",
            pidfile.display()
        ))
        .ready_line("up", Duration::from_secs(10))
        .spawn()
        .expect("up");
        let grandchild = std::fs::read_to_string(&pidfile)
            .expect("pid")
            .trim()
            .to_owned();
        let alive = |pid: &str| Path::new(&format!("/proc/{pid}")).exists();
        assert!(alive(&grandchild));
        drop(p);
        // Reaped by init once killed: poll its /proc entry with a deadline.
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(&grandchild)
            && std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(Instant::now() < deadline, "{grandchild} outlived its group");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process group id of `pid` (`self` for this process), from /proc.
    fn pgrp(pid: &str) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        // Fields after the command name (which may hold spaces): state, ppid, pgrp.
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        rest.split(' ').nth(2).expect("pgrp").to_owned()
    }

    #[test]
    fn an_interruptible_process_shares_our_group_and_is_terminated_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("out.log");
        let p =
            sh("trap 'echo terminated >&2; exit 0' TERM; echo up; while :; do sleep 0.05; done")
                .interruptible()
                .output(&log)
                .ready_line("up", Duration::from_secs(10))
                .spawn()
                .expect("up");
        let pid = p.pid().to_string();
        assert_eq!(pgrp(&pid), pgrp("self"));
        assert_ne!(pgrp(&pid), pid);
        drop(p);
        // Reaped by the drop, so its /proc entry is gone; SIGTERM (not SIGKILL) ended it.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        let text = std::fs::read_to_string(&log).expect("log");
        assert!(text.contains("terminated"), "{text}");
    }

    #[test]
    fn waits_for_a_port() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut p = sh("sleep 30").spawn().expect("started");
        p.wait_for_port(addr, Duration::from_secs(5))
            .expect("listening");
        drop(listener);
        let mut gone = sh("exit 0").spawn().expect("started");
        let free = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let err = gone
            .wait_for_port(free, Duration::from_secs(5))
            .expect_err("nothing listens");
        assert!(matches!(err, ProcError::Exited { .. }), "{err}");
    }

    #[test]
    fn missing_binaries_say_how_to_build_them() {
        let err = sibling_binary("no-such-binary").expect_err("missing");
        assert!(err.to_string().contains("build it first"), "{err}");
    }
}
