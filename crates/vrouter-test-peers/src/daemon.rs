//! The real vrouter-daemon on loopback: Debian's `redis-server`, the
//! daemon's `vrouter-server` in front of it, and `vrouter-agent`s connected
//! to that server, each running the pushed config with the stub vbash.
//!
//! The binaries come from `cargo xtask testenv` (built from the vendored
//! source in `shared/peers/vrouter-daemon`). Nothing here speaks the
//! daemon's protocol: the tests talk to the server's ControlService, and
//! the agent talks to the server, as in production.
//!
//! The agent runs every apply as a script whose first line is
//! `#!/bin/vbash`. So each agent runs in a private mount namespace
//! (`unshare --mount`) where an overlay on `/usr/bin` adds `vbash`: the
//! sandbox's bash with the stub vyatta functions ([`GuestSandbox`]). The
//! stub log then shows what the real agent's script did, and what `load`
//! read, byte for byte. Its temporary scripts go to a private `TMPDIR`.
//!
//! Every process is killed (SIGKILL, with its process group) when its
//! handle is dropped, also when the test panics.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use vrouter_providers::daemon::proto::IsConnectedRequest;
use vrouter_providers::daemon::proto::control_service_client::ControlServiceClient;

use crate::guest::GuestSandbox;

/// How to get what these tests need, for the messages of a failed start.
pub const HOW_TO_GET_THE_DAEMON: &str = "the real vrouter-daemon is built by `cargo xtask testenv` (or `cargo xtask \
     test`) from ../shared/peers/vrouter-daemon; redis-server comes from Debian (`apt-get install -y redis-server`, \
     which `cargo xtask test` does when it is missing)";

/// How long a process may take to come up on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A child process killed with its whole process group on drop.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, mut command: Command, log: PathBuf) -> Proc {
        let out = fs::File::create(&log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().expect("clone the log file handle");
        command.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({command:?}): {e}; {HOW_TO_GET_THE_DAEMON}"));
        Proc { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal_group(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), "--".into(), format!("-{}", self.pid())])
            .stderr(Stdio::null())
            .status()
            .expect("running kill");
        // A group whose members are all gone is not an error here.
        let _ = status;
    }

    fn kill(&mut self) {
        self.signal_group("KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nobody listens on right now. Another process may take it
/// before ours binds it; callers retry a start that fails.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

fn program_on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .or_else(|| {
            [
                PathBuf::from("/usr/bin").join(name),
                PathBuf::from("/usr/sbin").join(name),
            ]
            .into_iter()
            .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} not found on PATH; {HOW_TO_GET_THE_DAEMON}"))
}

/// Redis on a private loopback port, with its own data directory and no
/// persistence.
struct Redis {
    // Held for its drop, which kills the server.
    _proc: Proc,
    addr: SocketAddr,
}

impl Redis {
    fn start(dir: &Path) -> Redis {
        let binary = program_on_path("redis-server");
        let data = dir.join("redis");
        fs::create_dir_all(&data).expect("create the redis data directory");
        for attempt in 0.. {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let mut command = Command::new(&binary);
            command.args([
                "--bind",
                "127.0.0.1",
                "--port",
                &addr.port().to_string(),
                "--dir",
                data.to_str().expect("UTF-8 temp path"),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                "",
            ]);
            let mut proc = Proc::spawn("redis-server", command, dir.join("redis.log"));
            if Self::ping(&mut proc, addr) {
                return Redis { _proc: proc, addr };
            }
            assert!(attempt < 5, "redis-server did not start; its log:\n{}", proc.log());
        }
        unreachable!()
    }

    /// Whether redis answers PING on `addr`; false when it exited (its port
    /// was taken), panics when it neither answers nor exits.
    fn ping(proc: &mut Proc, addr: SocketAddr) -> bool {
        let started = Instant::now();
        loop {
            if let Ok(Some(_)) = proc.child.try_wait() {
                return false;
            }
            if let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                let mut reply = [0u8; 7];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                if stream.write_all(b"PING\r\n").is_ok()
                    && stream.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return true;
                }
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "redis-server does not answer on {addr}; its log:\n{}",
                proc.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The real `vrouter-server` with its own Redis. Agents are started with
/// [`Daemon::start_agent`].
pub struct Daemon {
    server: Option<Proc>,
    control: SocketAddr,
    agents: SocketAddr,
    binaries: (PathBuf, PathBuf),
    // Dropped after the server: the server's Redis goes last.
    redis: Redis,
    dir: TempDir,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("control", &self.control)
            .field("agents", &self.agents)
            .field("redis", &self.redis.addr)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Starts Redis and the server; panics, saying how to get what is
    /// missing, when either cannot start.
    pub fn start() -> Daemon {
        let binaries = vrouter_test_apiserver::vrouter_daemon()
            .unwrap_or_else(|e| panic!("cannot start the real vrouter-daemon: {e}; {HOW_TO_GET_THE_DAEMON}"));
        let dir = tempfile::Builder::new()
            .prefix("vrouter-daemon-")
            .tempdir()
            .expect("create the daemon's directory");
        let redis = Redis::start(dir.path());
        let mut daemon = Daemon {
            server: None,
            control: SocketAddr::from(([127, 0, 0, 1], 0)),
            agents: SocketAddr::from(([127, 0, 0, 1], 0)),
            binaries,
            redis,
            dir,
        };
        daemon.start_server(None);
        daemon
    }

    /// Starts the server, on `ports` (control, agents) when given (a
    /// restart keeps its addresses), else on free ones.
    fn start_server(&mut self, ports: Option<(SocketAddr, SocketAddr)>) {
        for attempt in 0.. {
            let (control, agents) = ports.unwrap_or_else(|| {
                (
                    SocketAddr::from(([127, 0, 0, 1], free_port())),
                    SocketAddr::from(([127, 0, 0, 1], free_port())),
                )
            });
            let mut command = Command::new(&self.binaries.0);
            command.args([
                "--control-listen",
                &control.to_string(),
                "--agent-listen",
                &agents.to_string(),
                "--redis-addr",
                &self.redis.addr.to_string(),
                // The server only stores it in Redis next to each agent.
                "--pod-ip",
                "127.0.0.1",
            ]);
            let log = self.dir.path().join(format!("server-{attempt}.log"));
            let mut proc = Proc::spawn("vrouter-server", command, log);
            let started = Instant::now();
            let up = loop {
                if let Ok(Some(_)) = proc.child.try_wait() {
                    break false;
                }
                let listening = |a: &SocketAddr| TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok();
                if listening(&control) && listening(&agents) {
                    break true;
                }
                assert!(
                    started.elapsed() < START_LIMIT,
                    "vrouter-server does not listen on {control} and {agents}; its log:\n{}",
                    proc.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            if up {
                self.control = control;
                self.agents = agents;
                self.server = Some(proc);
                return;
            }
            assert!(
                attempt < 5 && ports.is_none(),
                "vrouter-server exited during startup; its log:\n{}",
                proc.log()
            );
        }
    }

    /// `host:port` of the ControlService, as a VRouterTarget's
    /// `daemon.address` holds it.
    pub fn address(&self) -> String {
        self.control.to_string()
    }

    /// `host:port` of the AgentService agents connect to.
    pub fn agent_address(&self) -> String {
        self.agents.to_string()
    }

    /// The server's output so far (all runs of it).
    pub fn server_log(&self) -> String {
        let mut logs: Vec<PathBuf> = fs::read_dir(self.dir.path())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        logs.retain(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("server-"))
        });
        logs.sort();
        logs.iter().map(|p| fs::read_to_string(p).unwrap_or_default()).collect()
    }

    /// SIGKILLs the server: no graceful stop, its agents' Redis entries stay
    /// until they expire, as after a crash.
    pub fn kill_server(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
    }

    /// Starts the server again on the same addresses and the same Redis.
    pub fn restart_server(&mut self) {
        self.kill_server();
        self.start_server(Some((self.control, self.agents)));
    }

    /// Starts an agent with id `agent_id` and waits until the server reports
    /// it connected.
    pub async fn start_agent(&self, agent_id: &str, options: AgentFlags) -> Agent {
        let agent = self.spawn_agent(agent_id, options);
        agent.wait_connected(self, true).await;
        agent
    }

    /// Starts an agent without waiting for it to connect.
    pub fn spawn_agent(&self, agent_id: &str, options: AgentFlags) -> Agent {
        let dir = tempfile::Builder::new()
            .prefix("vrouter-agent-")
            .tempdir()
            .expect("create the agent's directory");
        let sandbox = GuestSandbox::new(dir.path(), "vyos");
        // The overlay's upper layer holds only `vbash`; the work directory
        // must be on the same filesystem.
        let upper = dir.path().join("usr-bin-upper");
        let work = dir.path().join("usr-bin-work");
        let tmp = dir.path().join("tmp");
        for d in [&upper, &work, &tmp] {
            fs::create_dir_all(d).expect("create the agent's directories");
        }
        fs::copy(sandbox.dir().join("vbash"), upper.join("vbash")).expect("place vbash in the overlay");
        let mut args: Vec<String> = vec![
            "--server".into(),
            self.agent_address(),
            "--agent-id".into(),
            agent_id.into(),
        ];
        if let Some(policy) = &options.disconnect_policy {
            args.extend(["--disconnect-policy".into(), policy.clone()]);
        }
        if let Some(retries) = options.init_max_retries {
            args.extend(["--init-max-retries".into(), retries.to_string()]);
        }
        if let Some(init) = &options.init_config {
            let path = dir.path().join("init.yaml");
            fs::write(&path, init).expect("write the init config");
            args.extend(["--init-config".into(), path.to_str().expect("UTF-8 temp path").into()]);
        }
        let mut command = Command::new(program_on_path("unshare"));
        command
            .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(
                "mount -t overlay overlay -o \"lowerdir=/usr/bin,upperdir=$1,workdir=$2\" /usr/bin || exit 97\n\
                 shift 2\n\
                 exec \"$@\"",
            )
            .arg("vrouter-agent-namespace")
            .arg(&upper)
            .arg(&work)
            .arg(&self.binaries.1)
            .args(&args)
            .env("TMPDIR", &tmp)
            .env_remove("BASH_ENV");
        let proc = Proc::spawn("vrouter-agent", command, dir.path().join("agent.log"));
        Agent {
            id: agent_id.to_string(),
            proc: Some(proc),
            sandbox,
            dir,
        }
    }

    /// A client of the ControlService on its own connection, for calls
    /// the provider would not make.
    pub async fn control_client(&self) -> ControlServiceClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.control))
            .expect("a valid URI")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connecting to the ControlService at {}: {e}", self.control));
        ControlServiceClient::new(channel)
    }

    /// The ControlService's own answer to `IsConnected(agent_id)`.
    pub async fn is_connected(&self, agent_id: &str) -> bool {
        let mut client = self.control_client().await;
        client
            .is_connected(IsConnectedRequest {
                agent_id: agent_id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("IsConnected({agent_id}): {e}; server log:\n{}", self.server_log()))
            .into_inner()
            .connected
    }
}

/// How an agent is started (all optional; the agent's defaults otherwise).
#[derive(Clone, Debug, Default)]
pub struct AgentFlags {
    /// `--disconnect-policy` (`keep` or `rollback`).
    pub disconnect_policy: Option<String>,
    /// `--init-max-retries`.
    pub init_max_retries: Option<u32>,
    /// The YAML of `--init-config` (`config`, `commands`, `after_config`,
    /// `after_commands`).
    pub init_config: Option<String>,
}

/// One running `vrouter-agent` and the router it stands for.
pub struct Agent {
    id: String,
    proc: Option<Proc>,
    sandbox: GuestSandbox,
    dir: TempDir,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Agent {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The router side: the stub log, the running config, `config.boot`.
    pub fn sandbox(&self) -> &GuestSandbox {
        &self.sandbox
    }

    /// A script line that waits until [`Agent::open_gate`] opens `name`:
    /// an apply that holds until the test has seen what it wants, however
    /// slow the machine is.
    pub fn gate(&self, name: &str) -> String {
        format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done",
            self.dir.path().join(format!("gate-{name}")).display()
        )
    }

    /// Lets every script waiting at gate `name` go on.
    pub fn open_gate(&self, name: &str) {
        fs::write(self.dir.path().join(format!("gate-{name}")), b"").expect("open the gate");
    }

    /// Where the agent writes each script before running it (its `TMPDIR`).
    pub fn script_dir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// The agent's own output so far.
    pub fn log(&self) -> String {
        self.proc
            .as_ref()
            .map(Proc::log)
            .unwrap_or_else(|| fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default())
    }

    /// Waits until the server reports this agent connected (`true`) or not.
    pub async fn wait_connected(&self, daemon: &Daemon, connected: bool) {
        let started = Instant::now();
        loop {
            if daemon.is_connected(&self.id).await == connected {
                return;
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "agent {} still {} after {START_LIMIT:?}; agent log:\n{}\nserver log:\n{}",
                self.id,
                if connected { "not connected" } else { "connected" },
                self.log(),
                daemon.server_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs the agent and every script it runs.
    pub fn kill(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.kill();
        }
    }

    /// Freezes (SIGSTOP) the agent and its scripts.
    pub fn freeze(&self) {
        if let Some(proc) = &self.proc {
            proc.signal_group("STOP");
        }
    }

    /// Thaws (SIGCONT) what [`Agent::freeze`] froze.
    pub fn thaw(&self) {
        if let Some(proc) = &self.proc {
            proc.signal_group("CONT");
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Thaw first: a stopped group ignores nothing but SIGKILL, which is
        // what follows anyway; this keeps `wait` from blocking on a stopped child.
        self.thaw();
        self.kill();
    }
}
