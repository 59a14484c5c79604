//! What a lab run is asked to do, as plain values: the hops, the hosts
//! with their stacks, and what runs where. `cli::lab` checks the command
//! line (or a topology file) and builds a [`Plan`]; nothing here knows
//! the flags.

use std::path::PathBuf;

use xferlab_core::link::LinkConfig;

use crate::net::Family;
use crate::output::Format;

/// KEY -> VALUE pairs for one namespace, in the order given.
pub type Sysctls = Vec<(String, String)>;

/// One host namespace: its name (also the last part of its namespace's
/// name), the sysctls set in it and its link MTU (None: the lab's --mtu).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSpec {
    pub name: String,
    pub sysctls: Sysctls,
    pub mtu: Option<u32>,
}

/// An xferlab test from one client host against one server host.
#[derive(Debug)]
pub struct HostTest {
    pub client: String,
    pub server: String,
    /// The test names its own server (a lab host, e.g. an exec'd iperf3):
    /// that host's name; the lab neither inserts a server nor a port.
    pub target: Option<String>,
    /// Shown in the result: `@bg` or the plain verb.
    pub label: String,
    /// The verb and its flags (`stream -t 5 -C cubic`), as given.
    pub words: Vec<String>,
    /// The HOST the words name, if any (then `target` is its lab host).
    pub host: Option<String>,
    /// The test's address family, output format and output file.
    pub family: Family,
    pub format: Format,
    pub output: Option<PathBuf>,
}

impl HostTest {
    pub fn verb(&self) -> &str {
        &self.words[0]
    }
}

/// What a lab runs.
#[derive(Debug)]
pub enum Program {
    Test(HostTest),
    /// `exec HOST -- CMD`: killed with the lab unless it ends first.
    Exec {
        host: String,
        argv: Vec<String>,
    },
}

/// `--spin-us`: a fixed busy-wait, or one derived from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spin {
    Auto,
    Us(u64),
}

/// A lab run, checked: what `xferlab lab`'s command line asks for as
/// plain values (`cli::lab` builds it from the flags).
#[derive(Debug)]
pub struct Plan {
    /// Hop 1 (the bottleneck) first: (c2s, s2c).
    pub hops: Vec<(LinkConfig, LinkConfig)>,
    pub clients: Vec<HostSpec>,
    pub servers: Vec<HostSpec>,
    pub programs: Vec<Program>,
    /// One plain test: its own document gets the lab section.
    pub single: bool,
    pub mtu: u32,
    pub offload: bool,
    pub pcap: Option<PathBuf>,
    pub pcap_snaplen: u32,
    pub buffers: usize,
    /// TUN transmit queue: the ring between a host's kernel and the
    /// emulator (the kernel default 500 silently dropped bursts).
    pub txqueuelen: u32,
    pub realtime: bool,
    pub spin: Spin,
    pub probe: bool,
    pub allow_invalid: bool,
    /// A router namespace between the emulated link and the server.
    pub router: bool,
    /// How the whole run is written: the single test's format and output
    /// file; with several tests, JSON when every test asked for it.
    pub format: Format,
    pub output: Option<PathBuf>,
}
