//! Cycles in a directed graph of named nodes: the strongly connected groups, and one
//! shortest cycle through a group to show.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// from → to → a label of the edge (where it comes from).
pub(super) type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The strongly connected groups of more than one node (Tarjan's algorithm); each
/// group sorted, groups in order of their first member.
pub(super) fn cycles(nodes: &BTreeSet<String>, edges: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flat_map(BTreeMap::keys) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(lw);
                }
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            group.sort();
            s.out.push(group);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let all: BTreeSet<&String> = nodes
        .iter()
        .chain(edges.keys())
        .chain(edges.values().flat_map(BTreeMap::keys))
        .collect();
    for n in all {
        if !s.index.contains_key(n.as_str()) {
            visit(&mut s, n);
        }
    }
    let mut out: Vec<Vec<String>> = s.out.into_iter().filter(|g| g.len() > 1).collect();
    out.sort();
    out
}

/// The shortest path from `start` back to itself inside `members`, as names (first
/// and last are `start`).
pub(super) fn shortest_cycle(edges: &Graph, start: &str, members: &BTreeSet<&str>) -> Vec<String> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(m) = queue.pop_front() {
        for to in edges.get(m).into_iter().flat_map(BTreeMap::keys) {
            let to = to.as_str();
            if !members.contains(to) || prev.contains_key(to) {
                continue;
            }
            prev.insert(to, m);
            if to == start {
                let mut path = vec![start.to_string()];
                let mut at = m;
                while at != start {
                    path.push(at.to_string());
                    at = prev[at];
                }
                path.push(start.to_string());
                path.reverse();
                return path;
            }
            queue.push_back(to);
        }
    }
    // A strongly connected group always has a cycle through each member.
    vec![start.to_string()]
}
