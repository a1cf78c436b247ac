//! Table-driven tests of the capacity tracker and its memory per node.

use super::*;

const GI: u64 = 1 << 30;

fn node(cpu: u32, mem_gi: u64, ready: bool) -> NodeCapacity {
    NodeCapacity {
        cpu_milli: cpu,
        memory: mem_gi * GI,
        pods: 110,
        ready,
    }
}

fn req(cpu: u32, mem_gi: u64) -> PodRequests {
    PodRequests {
        cpu_milli: cpu,
        memory: mem_gi * GI,
    }
}

/// One step of a scenario.
enum Op {
    Node(&'static str, NodeCapacity),
    DelNode(&'static str),
    Pod(&'static str, Option<(&'static str, PodRequests)>),
    DelPod(&'static str),
}

fn run(ops: &[Op]) -> Tracker {
    let mut t = Tracker::new();
    for op in ops {
        match op {
            Op::Node(n, c) => {
                t.apply_node(n, *c);
            }
            Op::DelNode(n) => {
                t.remove_node(n);
            }
            Op::Pod(p, place) => {
                t.apply_pod("ns", p, *place);
            }
            Op::DelPod(p) => {
                t.remove_pod("ns", p);
            }
        }
    }
    t
}

fn res(cpu: u64, mem_gi: u64, pods: u64) -> Resources {
    Resources {
        cpu_milli: cpu,
        memory: mem_gi * GI,
        pods,
    }
}

#[test]
fn capacity_table() {
    use Op::*;
    // (name, ops, nodes (total, ready), allocatable, allocated, largest free)
    type Case = (
        &'static str,
        Vec<Op>,
        (u64, u64),
        Resources,
        Resources,
        Option<Resources>,
    );
    let cases: Vec<Case> = vec![
        (
            "add pods",
            vec![
                Node("a", node(4000, 16, true)),
                Pod("p1", Some(("a", req(500, 1)))),
                Pod("p2", Some(("a", req(1500, 2)))),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(2000, 3, 2),
            Some(res(2000, 13, 108)),
        ),
        (
            "repeated apply is idempotent",
            vec![
                Node("a", node(4000, 16, true)),
                Pod("p1", Some(("a", req(500, 1)))),
                Pod("p1", Some(("a", req(500, 1)))),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(500, 1, 1),
            Some(res(3500, 15, 109)),
        ),
        (
            "resized pod replaces its requests",
            vec![
                Node("a", node(4000, 16, true)),
                Pod("p1", Some(("a", req(500, 1)))),
                Pod("p1", Some(("a", req(1000, 4)))),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(1000, 4, 1),
            Some(res(3000, 12, 109)),
        ),
        (
            "scale down deletes pods",
            vec![
                Node("a", node(4000, 16, true)),
                Pod("p1", Some(("a", req(500, 1)))),
                Pod("p2", Some(("a", req(500, 1)))),
                DelPod("p1"),
                DelPod("p1"),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(500, 1, 1),
            Some(res(3500, 15, 109)),
        ),
        (
            "terminated pod stops counting",
            vec![
                Node("a", node(4000, 16, true)),
                Pod("p1", Some(("a", req(500, 1)))),
                Pod("p1", None),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(0, 0, 0),
            Some(res(4000, 16, 110)),
        ),
        (
            "unscheduled pod does not count",
            vec![Node("a", node(4000, 16, true)), Pod("p1", None)],
            (1, 1),
            res(4000, 16, 110),
            res(0, 0, 0),
            Some(res(4000, 16, 110)),
        ),
        (
            "NotReady node leaves capacity with its pods",
            vec![
                Node("a", node(4000, 16, true)),
                Node("b", node(8000, 32, true)),
                Pod("p1", Some(("b", req(1000, 1)))),
                Node("b", node(8000, 32, false)),
            ],
            (2, 1),
            res(4000, 16, 110),
            res(0, 0, 0),
            Some(res(4000, 16, 110)),
        ),
        (
            "node comes back Ready with its pods",
            vec![
                Node("b", node(8000, 32, false)),
                Pod("p1", Some(("b", req(1000, 1)))),
                Node("b", node(8000, 32, true)),
            ],
            (1, 1),
            res(8000, 32, 110),
            res(1000, 1, 1),
            Some(res(7000, 31, 109)),
        ),
        (
            "pod seen before its node",
            vec![
                Pod("p1", Some(("a", req(1000, 1)))),
                Node("a", node(4000, 16, true)),
            ],
            (1, 1),
            res(4000, 16, 110),
            res(1000, 1, 1),
            Some(res(3000, 15, 109)),
        ),
        (
            "deleted node drops out",
            vec![
                Node("a", node(4000, 16, true)),
                Node("b", node(2000, 8, true)),
                Pod("p1", Some(("a", req(1000, 1)))),
                DelNode("a"),
            ],
            (1, 1),
            res(2000, 8, 110),
            res(0, 0, 0),
            Some(res(2000, 8, 110)),
        ),
        (
            "largest free is the node with most free cpu, not most allocatable",
            vec![
                Node("big", node(16000, 64, true)),
                Node("small", node(4000, 8, true)),
                Pod("p1", Some(("big", req(14000, 10)))),
            ],
            (2, 2),
            res(20000, 72, 220),
            res(14000, 10, 1),
            Some(res(4000, 8, 110)),
        ),
        (
            "ties on cpu broken by memory",
            vec![
                Node("a", node(4000, 8, true)),
                Node("b", node(4000, 16, true)),
            ],
            (2, 2),
            res(8000, 24, 220),
            res(0, 0, 0),
            Some(res(4000, 16, 110)),
        ),
        (
            "no ready node, no largest free",
            vec![Node("a", node(4000, 8, false))],
            (1, 0),
            res(0, 0, 0),
            res(0, 0, 0),
            None,
        ),
    ];
    for (name, ops, nodes, allocatable, allocated, largest) in cases {
        let s = run(&ops).summary();
        assert_eq!((s.nodes_total, s.nodes_ready), nodes, "{name}: nodes");
        assert_eq!(s.allocatable, allocatable, "{name}: allocatable");
        assert_eq!(s.allocated, allocated, "{name}: allocated");
        assert_eq!(s.largest_free, largest, "{name}: largest free");
    }
}

#[test]
fn placeholder_slots_are_reused() {
    let mut t = Tracker::new();
    t.apply_node("a", node(1000, 1, true));
    t.apply_pod("ns", "p", Some(("a", req(100, 0))));
    t.remove_node("a");
    assert_eq!(
        t.nodes.iter().filter(|n| n.req_pods > 0).count(),
        1,
        "pod keeps a placeholder"
    );
    t.remove_pod("ns", "p");
    assert!(t.node_index.is_empty());
    assert_eq!(t.free.len(), 1);
    t.apply_node("b", node(1000, 1, true));
    assert_eq!(t.nodes.len(), 1, "slot reused");
}

#[test]
fn resync_drops_what_the_relist_did_not_report() {
    let mut t = Tracker::new();
    t.apply_node("a", node(1000, 1, true));
    t.apply_node("b", node(1000, 1, true));
    t.apply_pod("ns", "p1", Some(("a", req(100, 0))));
    t.apply_pod("ns", "p2", Some(("b", req(100, 0))));
    t.begin_node_resync();
    t.begin_pod_resync();
    t.apply_node("a", node(1000, 1, true));
    t.apply_pod("ns", "p1", Some(("a", req(100, 0))));
    assert!(t.finish_node_resync());
    assert!(t.finish_pod_resync());
    let s = t.summary();
    assert_eq!(
        (s.nodes_total, s.allocated.pods, s.allocated.cpu_milli),
        (1, 1, 100)
    );
    assert!(!t.finish_pod_resync(), "no resync in progress");
}

#[test]
fn status_uses_quantity_notation() {
    let mut t = Tracker::new();
    t.apply_node(
        "a",
        NodeCapacity {
            cpu_milli: 160_000,
            memory: 640 * GI,
            pods: 2200,
            ready: true,
        },
    );
    t.apply_pod(
        "ns",
        "p",
        Some((
            "a",
            PodRequests {
                cpu_milli: 41_500,
                memory: 120 * GI,
            },
        )),
    );
    let s = t.summary();
    let rs = s.resource_summary();
    assert_eq!(rs.allocatable.cpu.as_deref(), Some("160"));
    assert_eq!(rs.allocatable.memory.as_deref(), Some("640Gi"));
    assert_eq!(rs.allocatable.pods.as_deref(), Some("2200"));
    assert_eq!(rs.allocated.cpu.as_deref(), Some("41500m"));
    assert_eq!(rs.allocated.memory.as_deref(), Some("120Gi"));
    assert_eq!(
        rs.largest_free.and_then(|l| l.cpu).as_deref(),
        Some("118500m")
    );
    assert_eq!(s.node_summary(), NodeSummary { total: 1, ready: 1 });
}

/// Entry sizes are part of the memory budget; a field added carelessly shows up here.
#[test]
fn entry_sizes() {
    assert_eq!(std::mem::size_of::<NodeSlot>(), 40);
    assert_eq!(std::mem::size_of::<PodSlot>(), 8);
    assert_eq!(std::mem::size_of::<(u64, PodSlot)>(), 16);
    assert_eq!(std::mem::size_of::<Shape>(), 16);
    assert_eq!(std::mem::size_of::<(u64, u32)>(), 16);
}

/// A member as the watches build it: one initial list of nodes, then of pods, with
/// `shapes` distinct request shapes.
fn fleet(nodes: usize, pods_per_node: usize, shapes: u32) -> Tracker {
    let mut t = Tracker::new();
    t.begin_node_resync();
    for n in 0..nodes {
        t.apply_node(&format!("node-{n:05}"), node(8000, 32, true));
    }
    t.finish_node_resync();
    t.begin_pod_resync();
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        for p in 0..pods_per_node {
            let shape = (n * pods_per_node + p) as u32 % shapes;
            t.apply_pod(
                "default",
                &format!("pod-{n}-{p}"),
                Some((&name, req(100 + shape, 0))),
            );
        }
    }
    t.finish_pod_resync();
    t
}

/// Bytes per tracked node, amortised: the whole tracker's heap (containers at their real
/// capacities, hash tables at their bucket counts) divided by the node count.
#[test]
fn memory_per_node() {
    const NODES: usize = 5000;
    // Nodes alone (slot + index + free list).
    let t = fleet(NODES, 0, 1);
    let per_node = t.node_heap_bytes() / NODES;
    assert!(per_node <= 80, "node state {per_node} bytes/node");
    // With pods, amortised over nodes, at 3 pods per node and 50 request shapes.
    let t = fleet(NODES, 3, 50);
    let amortised = t.heap_bytes() / NODES;
    assert!(
        amortised <= 200,
        "tracker with 3 pods/node: {amortised} bytes/node"
    );
    // Each further pod costs one 16-byte table entry plus a control byte, at
    // hashbrown's 7/16..7/8 load: 19–39 bytes.
    let t = fleet(NODES, 30, 50);
    let per_pod = (t.heap_bytes() - t.node_heap_bytes()) / (NODES * 30);
    assert!(per_pod <= 40, "{per_pod} bytes/pod");
    for density in [0, 1, 3, 10, 30, 110] {
        let t = fleet(NODES, density, 50);
        eprintln!(
            "{density:>3} pods/node: {} bytes/node",
            t.heap_bytes() / NODES
        );
    }
}
