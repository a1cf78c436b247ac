//! Local etcd clusters on loopback, for tests, benchmarks and local runs: free ports, one data directory, members killed on drop.
//!
//! The etcd binary comes from the caller (the project installs one with
//! `tools/install-etcd.sh`). Each member logs to `<dir>/<name>.log`, which start-up failures
//! quote.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

/// How long a member may take to answer after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a local cluster could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalEtcdError {
    /// A process, port or file operation failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// No running member named a leader it could be matched to.
    #[error("no running etcd member is the leader")]
    NoLeader,
    /// A member exited or did not answer in time.
    #[error("etcd member {member} did not start: {detail}")]
    Start {
        /// The member's name.
        member: String,
        /// Why, with the end of its log.
        detail: String,
    },
}

/// TLS for the members' client port (peer traffic stays on plain loopback).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The serving certificate (its SANs must include `127.0.0.1`).
    pub cert_file: PathBuf,
    /// Its key.
    pub key_file: PathBuf,
    /// The CA that signs accepted client certificates.
    pub trusted_ca_file: PathBuf,
    /// Whether clients must present a certificate signed by that CA.
    pub client_cert_auth: bool,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalEtcdOptions {
    /// The `etcd` binary.
    pub binary: PathBuf,
    /// Where the members' data directories and logs go.
    pub dir: PathBuf,
    /// How many members (1 or an odd number for a real quorum).
    pub members: usize,
    /// TLS on the client port.
    pub tls: Option<ServerTls>,
    /// More flags for every member, e.g. `--experimental-watch-progress-notify-interval=1s`.
    pub extra_args: Vec<String>,
    /// Where member `i` runs, for the first members; the rest (all, when empty) run on
    /// `127.0.0.1` in this network namespace.
    pub hosts: Vec<MemberHost>,
}

impl LocalEtcdOptions {
    /// `members` members of `binary` in `dir` on loopback: no TLS, no extra flags.
    pub fn new(binary: PathBuf, dir: PathBuf, members: usize) -> Self {
        LocalEtcdOptions {
            binary,
            dir,
            members,
            tls: None,
            extra_args: Vec::new(),
            hosts: Vec::new(),
        }
    }
}

/// Where one member runs: its address, and the network namespace it runs in (as a test host
/// of its own that can be cut off from the others).
#[derive(Debug, Clone)]
pub struct MemberHost {
    /// The address its client and peer ports listen on and advertise.
    pub address: std::net::IpAddr,
    /// A network namespace (`ip netns`) to run it in; `None`: this one.
    pub netns: Option<String>,
}

/// One member process.
#[derive(Debug)]
struct Member {
    name: String,
    client_url: String,
    netns: Option<String>,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

/// How starting members went.
enum Started {
    Ready,
    /// A member exited; the error quotes its log.
    Exited(LocalEtcdError),
}

/// A running local cluster; dropping it kills every member.
#[derive(Debug)]
pub struct LocalEtcd {
    binary: PathBuf,
    members: Vec<Member>,
    /// A client and a peer port per member, in member order.
    ports: Vec<u16>,
}

impl LocalEtcd {
    /// Starts the members and waits until each answers on its client port. A member that
    /// exits at once (another process took one of its ports) makes the whole cluster start
    /// again on other ports, up to three times.
    pub async fn start(options: LocalEtcdOptions) -> Result<Self, LocalEtcdError> {
        let mut attempt = 1;
        loop {
            let ports = free_ports(2 * options.members)?;
            let mut cluster = LocalEtcd {
                binary: options.binary.clone(),
                members: plan(&options, &ports),
                ports,
            };
            match cluster.start_members().await? {
                Started::Ready => return Ok(cluster),
                Started::Exited(err) if attempt < 3 => {
                    tracing::warn!(error = %err, attempt, "etcd member exited at start; retrying on other ports");
                    drop(cluster);
                    for i in 0..options.members {
                        let dir = options.dir.join(format!("m{i}"));
                        if dir.exists() {
                            std::fs::remove_dir_all(&dir)
                                .map_err(io(format!("removing {}", dir.display())))?;
                        }
                    }
                    attempt += 1;
                }
                Started::Exited(err) => return Err(err),
            }
        }
    }

    /// Starts the members of a cluster [`LocalEtcd::start`] made earlier in the same
    /// directory again, on the [ports](LocalEtcd::ports) it had: a member keeps its peer
    /// address in its data, so the same ports bring back the same cluster with its data.
    /// Fails if a port is taken now.
    pub async fn restart_on(
        options: LocalEtcdOptions,
        ports: Vec<u16>,
    ) -> Result<Self, LocalEtcdError> {
        if ports.len() != 2 * options.members {
            return Err(LocalEtcdError::Start {
                member: "m0".to_owned(),
                detail: format!(
                    "{} members need {} ports, not {}",
                    options.members,
                    2 * options.members,
                    ports.len()
                ),
            });
        }
        let mut cluster = LocalEtcd {
            binary: options.binary.clone(),
            members: plan(&options, &ports),
            ports,
        };
        match cluster.start_members().await? {
            Started::Ready => Ok(cluster),
            Started::Exited(err) => Err(err),
        }
    }

    /// The ports of the members (a client and a peer port each, in member order), for
    /// [`LocalEtcd::restart_on`].
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    async fn start_members(&mut self) -> Result<Started, LocalEtcdError> {
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        for i in 0..self.members.len() {
            if let Started::Exited(err) = self.wait_listening(i).await? {
                return Ok(Started::Exited(err));
            }
        }
        Ok(Started::Ready)
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The client URL of member `index`.
    pub fn endpoint(&self, index: usize) -> &str {
        &self.members[index].client_url
    }

    /// Kills member `index` at once (SIGKILL), as a crash would.
    pub fn kill(&mut self, index: usize) -> Result<(), LocalEtcdError> {
        let member = &mut self.members[index];
        if let Some(mut child) = member.child.take() {
            let name = member.name.clone();
            child
                .kill()
                .map_err(io(format!("killing etcd member {name}")))?;
            child
                .wait()
                .map_err(io(format!("reaping etcd member {name}")))?;
        }
        Ok(())
    }

    /// Stops every member as an operator would: SIGTERM, so each one syncs its write-ahead
    /// log and closes its database cleanly, then SIGKILL for any still running after `grace`.
    /// Returns how many members had to be killed.
    pub async fn stop(mut self, grace: Duration) -> usize {
        for member in &self.members {
            if let Some(child) = &member.child {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_child(child),
                    rustix::process::Signal::TERM,
                );
            }
        }
        let deadline = Instant::now() + grace;
        for member in &mut self.members {
            while let Some(child) = member.child.as_mut() {
                if !matches!(child.try_wait(), Ok(None)) {
                    member.child = None;
                } else if Instant::now() >= deadline {
                    break;
                } else {
                    // A child's exit has no future to await here (std's Child): poll it.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        // Drop kills and reaps whatever outlived the grace period.
        self.members.iter().filter(|m| m.child.is_some()).count()
    }

    /// The index of the member that leads the cluster now, asking each running member for
    /// its status (over plain gRPC: for clusters started without client TLS). A member that
    /// does not answer is passed over; the leader is the one whose own id is the leader id
    /// it reports.
    pub async fn leader(&self) -> Result<usize, LocalEtcdError> {
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let Ok(mut client) =
                etcd_client::Client::connect([member.client_url.as_str()], None).await
            else {
                continue;
            };
            if let Ok(status) = client.status().await
                && status.header().map(|h| h.member_id()) == Some(status.leader())
            {
                return Ok(index);
            }
        }
        Err(LocalEtcdError::NoLeader)
    }

    /// Starts member `index` again on its data directory and ports.
    pub async fn restart(&mut self, index: usize) -> Result<(), LocalEtcdError> {
        self.kill(index)?;
        self.spawn(index)?;
        match self.wait_listening(index).await? {
            Started::Ready => Ok(()),
            Started::Exited(err) => Err(err),
        }
    }

    fn spawn(&mut self, index: usize) -> Result<(), LocalEtcdError> {
        let member = &mut self.members[index];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log)
            .map_err(io(format!("opening {}", member.log.display())))?;
        let err_log = log
            .try_clone()
            .map_err(io(format!("opening {}", member.log.display())))?;
        let mut command = match &member.netns {
            // `ip netns exec` enters the namespace and execs etcd: the child is etcd itself.
            Some(netns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns]).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        let child = command
            .args(&member.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(io(format!("starting {}", self.binary.display())))?;
        member.child = Some(child);
        Ok(())
    }

    /// Waits until member `index` accepts connections on its client port (a cluster answers
    /// requests once a quorum of members is up; the store's own connect waits for that).
    async fn wait_listening(&mut self, index: usize) -> Result<Started, LocalEtcdError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let member = &mut self.members[index];
        let address = member
            .client_url
            .split("://")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        loop {
            if let Some(child) = member.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Ok(Started::Exited(start_error(
                    member,
                    &format!("exited with {status}"),
                )));
            }
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return Ok(Started::Ready);
            }
            if Instant::now() >= deadline {
                return Err(start_error(member, "its client port did not open in time"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The members of a cluster on `ports` (a client and a peer port per member).
fn plan(options: &LocalEtcdOptions, ports: &[u16]) -> Vec<Member> {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let token = format!("meridian-{}-{}", std::process::id(), ports[0]);
    let loopback = MemberHost {
        address: std::net::Ipv4Addr::LOCALHOST.into(),
        netns: None,
    };
    let host = |i: usize| options.hosts.get(i).unwrap_or(&loopback);
    // `SocketAddr` puts an IPv6 address in brackets, as a URL wants it.
    let url = |scheme: &str, i: usize, port: u16| {
        format!(
            "{scheme}://{}",
            std::net::SocketAddr::new(host(i).address, port)
        )
    };
    let peers: Vec<(String, String)> = (0..options.members)
        .map(|i| (format!("m{i}"), url("http", i, ports[2 * i + 1])))
        .collect();
    let initial_cluster = peers
        .iter()
        .map(|(name, url)| format!("{name}={url}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::with_capacity(options.members);
    for (i, (name, peer_url)) in peers.iter().enumerate() {
        let client_url = url(scheme, i, ports[2 * i]);
        let data_dir = options.dir.join(name);
        let mut args = vec![
            format!("--name={name}"),
            format!("--data-dir={}", data_dir.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={initial_cluster}"),
            "--initial-cluster-state=new".to_owned(),
            format!("--initial-cluster-token={token}"),
            "--log-level=warn".to_owned(),
        ];
        if let Some(tls) = &options.tls {
            args.push(format!("--cert-file={}", tls.cert_file.display()));
            args.push(format!("--key-file={}", tls.key_file.display()));
            args.push(format!(
                "--trusted-ca-file={}",
                tls.trusted_ca_file.display()
            ));
            if tls.client_cert_auth {
                args.push("--client-cert-auth".to_owned());
            }
        }
        args.extend(options.extra_args.iter().cloned());
        members.push(Member {
            name: name.clone(),
            client_url,
            netns: host(i).netns.clone(),
            args,
            log: options.dir.join(format!("{name}.log")),
            child: None,
        });
    }
    members
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> LocalEtcdError {
    move |source| LocalEtcdError::Io { context, source }
}

fn start_error(member: &Member, why: &str) -> LocalEtcdError {
    let mut detail = why.to_owned();
    let _ = write!(
        detail,
        "; the end of {}:\n{}",
        member.log.display(),
        tail(&member.log)
    );
    LocalEtcdError::Start {
        member: member.name.clone(),
        detail,
    }
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// `count` distinct loopback ports that were free a moment ago. All are held until every
/// one is chosen, so they differ; another process may still take one before etcd binds it,
/// which start-up then reports.
fn free_ports(count: usize) -> Result<Vec<u16>, LocalEtcdError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("reserving loopback ports".to_owned()))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(io("reading reserved ports".to_owned()))
}
