//! Network namespaces for end-to-end tests that need several machines with their own
//! addresses and a network that can fail: Linux bridges ("LANs") in the root namespace,
//! one namespace per machine joined to them by veth pairs, processes started in a
//! namespace (`ip netns exec`), and the two faults a test makes with `ip` alone:
//!
//! * [`Network::set_port`]: a machine's port on a LAN goes dark (the bridge side of its
//!   veth down). Its packets on that LAN are dropped silently, as with a pulled cable
//!   or a firewall's DROP: connections hang until their timeouts.
//! * [`Network::set_unreachable`]: in a machine's namespace, a route makes one address
//!   unreachable. Connections to it fail at once (`No route to host`), as with a
//!   firewall's REJECT.
//!
//! (No iptables/nftables binary is needed, and the kernel's tc classifiers are not
//! either: both are missing in some containers.)
//!
//! Everything is root-only. A [`Network`] owns what it creates and removes it on drop,
//! also when a test panics: the processes still running in its namespaces (killed by
//! pid: only processes of its own namespaces), the namespaces, the veth pairs and the
//! bridges. Names start with `tp<pid in hex>z` so that leftovers of a killed run are
//! recognisable (`ip netns list`, `ip link`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

/// Why this machine cannot run namespace tests, if it cannot: not root, or no `ip`.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some(
            "this test needs root (it creates network namespaces, veth pairs and a bridge \
             with `ip`); run it as root, as CI does"
                .into(),
        );
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip -V` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!(
            "this test needs the `ip` command (iproute2: `apt-get install -y iproute2`): {e}"
        )),
    }
}

/// Runs `ip ARGS`; an error with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip`")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip_output(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip`")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A bridge in the root namespace with a /24 of its own; the root namespace is `.1`.
#[derive(Clone, Debug)]
pub struct Lan {
    pub bridge: String,
    /// The first three octets.
    net: [u8; 3],
}

impl Lan {
    /// The address `10.x.y.host` on this LAN.
    pub fn ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.net[0], self.net[1], self.net[2], host)
    }
}

/// A machine's attachment to a LAN.
#[derive(Clone, Debug)]
pub struct Port {
    /// Its index in [`Network::lans`].
    pub lan: usize,
    /// The veth end inside the namespace (`eth0`, `eth1`…).
    pub iface: String,
    /// The veth end in the root namespace, enslaved to the bridge.
    pub root_iface: String,
    pub ip: Ipv4Addr,
}

/// A namespace of the network: one machine.
#[derive(Clone, Debug)]
pub struct Namespace {
    pub name: String,
    pub ports: Vec<Port>,
}

impl Namespace {
    /// Its address on LAN `lan`.
    pub fn ip_on(&self, lan: usize) -> Option<Ipv4Addr> {
        self.ports.iter().find(|p| p.lan == lan).map(|p| p.ip)
    }
}

/// The LANs and namespaces a test made; removed on drop.
pub struct Network {
    prefix: String,
    pub lans: Vec<Lan>,
    namespaces: Vec<String>,
    /// Root-side veth ends, then bridges: deleted on drop (in reverse).
    links: Vec<String>,
    next_link: u32,
}

impl Network {
    /// An empty network (nothing is created yet). Fails with the reason when this
    /// machine cannot run it ([`unavailable`]).
    pub fn new() -> anyhow::Result<Self> {
        if let Some(why) = unavailable() {
            bail!("{why}");
        }
        Ok(Self {
            prefix: format!("tp{:x}z", std::process::id()),
            lans: Vec::new(),
            namespaces: Vec::new(),
            links: Vec::new(),
            next_link: 0,
        })
    }

    /// The prefix of every name this network gives.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn link_name(&mut self, kind: char) -> String {
        self.next_link += 1;
        // At most 15 bytes: "tp" + 6 hex digits + "z" + kind + up to 3 digits (+ "p").
        format!("{}{kind}{}", self.prefix, self.next_link)
    }

    /// A new bridge with a /24 that no address or route of this machine names yet
    /// (`10.x.y.0/24`, the root namespace at `.1`); its index in [`Network::lans`].
    pub fn add_lan(&mut self) -> anyhow::Result<usize> {
        let used = ip_output(&["-o", "-4", "addr", "show"])?
            + &ip_output(&["-4", "route", "show", "table", "all"])?
                .lines()
                .map(|l| format!(" {l}\n"))
                .collect::<String>();
        let pid = std::process::id();
        let second = 100 + (pid % 100) as u8;
        let net = (0..=255u8)
            .map(|i| [10, second, (pid / 100 % 256) as u8 ^ i])
            .find(|n| {
                let taken = format!(" {}.{}.{}.", n[0], n[1], n[2]);
                !used.contains(&taken) && !self.lans.iter().any(|l| l.net == *n)
            })
            .with_context(|| format!("no free 10.{second}.*.0/24 on this machine"))?;
        let bridge = self.link_name('x');
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        self.links.push(bridge.clone());
        let lan = Lan { bridge, net };
        ip(&[
            "addr",
            "add",
            &format!("{}/24", lan.ip(1)),
            "dev",
            &lan.bridge,
        ])?;
        ip(&["link", "set", &lan.bridge, "up"])?;
        self.lans.push(lan);
        Ok(self.lans.len() - 1)
    }

    /// One more address of the root namespace on LAN `lan` (`.host`): a second
    /// front door in the root namespace that hosts can be cut from on its own.
    pub fn add_root_address(&self, lan: usize, host: u8) -> anyhow::Result<Ipv4Addr> {
        let l = &self.lans[lan];
        let a = l.ip(host);
        ip(&["addr", "add", &format!("{a}/24"), "dev", &l.bridge])?;
        Ok(a)
    }

    /// A new namespace `<prefix>-<label>` with loopback up and one port per
    /// `(lan, host)`: `eth0`, `eth1`… at `10.x.y.host`.
    pub fn add_namespace(
        &mut self,
        label: &str,
        ports: &[(usize, u8)],
    ) -> anyhow::Result<Namespace> {
        let name = format!("{}-{label}", self.prefix);
        ip(&["netns", "add", &name])?;
        self.namespaces.push(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        let mut made = Vec::new();
        for (i, (lan, host)) in ports.iter().enumerate() {
            let root_iface = self.link_name('v');
            let peer = format!("{root_iface}p");
            ip(&[
                "link",
                "add",
                &root_iface,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
            ])?;
            self.links.push(root_iface.clone());
            let iface = format!("eth{i}");
            ip(&["link", "set", &peer, "netns", &name])?;
            ip(&["-n", &name, "link", "set", &peer, "name", &iface])?;
            let addr = self.lans[*lan].ip(*host);
            ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &iface,
            ])?;
            ip(&["-n", &name, "link", "set", &iface, "up"])?;
            ip(&[
                "link",
                "set",
                &root_iface,
                "master",
                &self.lans[*lan].bridge,
            ])?;
            ip(&["link", "set", &root_iface, "up"])?;
            made.push(Port {
                lan: *lan,
                iface,
                root_iface,
                ip: addr,
            });
        }
        Ok(Namespace { name, ports: made })
    }

    /// `ip netns exec NS PROGRAM`: a command that runs `program` in namespace `ns`
    /// (add its arguments). `ip` execs the program, so the child's pid is the
    /// program's.
    pub fn command(&self, ns: &Namespace, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns.name]).arg(program);
        c
    }

    /// Whether `port`'s side of its LAN carries packets: `false` turns the bridge side
    /// of its veth down, so that everything the machine sends on that LAN, and
    /// everything sent to it there, is dropped without an answer.
    pub fn set_port(&self, port: &Port, up: bool) -> anyhow::Result<()> {
        ip(&[
            "link",
            "set",
            &port.root_iface,
            if up { "up" } else { "down" },
        ])
    }

    /// In namespace `ns`, makes `to` unreachable (a `/32` unreachable route: connects
    /// fail at once with "No route to host"), or reachable again.
    pub fn set_unreachable(
        &self,
        ns: &Namespace,
        to: Ipv4Addr,
        unreachable: bool,
    ) -> anyhow::Result<()> {
        let dest = format!("{to}/32");
        if unreachable {
            ip(&["-n", &ns.name, "route", "add", "unreachable", &dest])
        } else {
            ip(&["-n", &ns.name, "route", "del", "unreachable", &dest])
        }
    }

    /// The pids of the processes in namespace `name`.
    fn pids(name: &str) -> Vec<i32> {
        ip_output(&["netns", "pids", name])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Whether anything of this network is still on the machine: its namespaces and
    /// links by name (for a test to show its cleanup worked).
    pub fn leftovers(prefix: &str) -> Vec<String> {
        let mut found = Vec::new();
        for out in [
            ip_output(&["netns", "list"]).unwrap_or_default(),
            ip_output(&["-o", "link", "show"]).unwrap_or_default(),
        ] {
            for line in out.lines() {
                let name = line
                    .split_whitespace()
                    .find(|w| w.trim_end_matches(':').starts_with(prefix))
                    .map(|w| w.trim_end_matches(':').split('@').next().unwrap_or(w));
                if let Some(n) = name {
                    found.push(n.to_string());
                }
            }
        }
        found
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for name in self.namespaces.iter().rev() {
            // Whatever still runs in our namespace was started by this test (or by a
            // tern-update it started): kill it by pid, then the namespace.
            for pid in Self::pids(name) {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
            let _ = ip(&["netns", "del", name]);
        }
        // Deleting a namespace deletes its veth ends and so their peers; delete what
        // is left (the bridges, any pair not moved yet).
        for link in self.links.iter().rev() {
            if ip(&["link", "show", link]).is_ok() {
                let _ = ip(&["link", "del", link]);
            }
        }
    }
}

/// A daemon started by a test, killed (SIGKILL, by its pid) and reaped on drop.
pub struct Process {
    child: Option<Child>,
    pub name: String,
}

impl Process {
    pub fn spawn(name: &str, mut cmd: Command) -> anyhow::Result<Self> {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {name}: {cmd:?}"))?;
        Ok(Self {
            child: Some(child),
            name: name.into(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether it has exited (then reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A TCP relay in the root namespace: connections to `listen` are passed to `to`
/// byte for byte (each direction closed when the other side closes it). It puts
/// something only reachable on the root's loopback (the harness's [`crate::gateway`])
/// at an address on a LAN.
pub struct Relay {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Relay {
    pub fn start(listen: SocketAddr, to: SocketAddr) -> anyhow::Result<Self> {
        let listener =
            TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("tern-e2e-relay".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    std::thread::spawn(move || pass(conn, to));
                }
            })?;
        Ok(Self { addr, stop })
    }
}

fn pass(a: TcpStream, to: SocketAddr) {
    let Ok(b) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return;
    };
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one = std::thread::spawn(move || copy(a, b));
    copy(b2, a2);
    let _ = one.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}
