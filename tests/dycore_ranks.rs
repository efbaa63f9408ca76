//! The dynamical core on several ranks (`examples/dycore/ranks.rs`): its periodic halo
//! updates become halo exchanges, and the time step on ranks is the time step on one
//! rank, bit for bit — on simulated ranks of the interpreter, and on MPI ranks through
//! `mpirun -n 4 sdflow run … --backend cpu` (the generic path: the rank program in the
//! JSON format, each rank's state in an `.npz` archive).

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/ranks.rs"]
mod ranks;
#[path = "../examples/dycore/reference.rs"]
mod reference;

mod common;

use std::collections::BTreeMap;

use program::Dycore;
use reference::{Config, State, random_smooth};
use sdflow::ir::interp::{Bindings, HostArray};
use sdflow::ir::{LibraryNode, Node};

fn config(nx: usize, ny: usize) -> Config {
    Config {
        nx,
        ny,
        ..Config::default()
    }
}

#[test]
fn the_time_step_on_simulated_ranks_is_one_ranks_bits() {
    // `ranks::run` compares the put-together result with one rank's, bit for bit, and
    // fails where a value differs.
    for (nx, ny, r) in [(8, 6, [2, 2]), (8, 6, [1, 2]), (6, 4, [3, 1])] {
        ranks::run(&config(nx, ny), r, 2, 7, false, false)
            .unwrap_or_else(|e| panic!("{nx} x {ny} on {r:?}: {e}"));
    }
    // The same without the program's own halo updates: the halo analysis's exchanges.
    ranks::run(&config(8, 6), [2, 2], 2, 7, false, true)
        .unwrap_or_else(|e| panic!("with the halo analysis: {e}"));
    // The rank program exchanges where the one-rank program copies its periodic halo:
    // consecutive updates in one exchange.
    let exchanges = |d: &Dycore| {
        let mut out = Vec::new();
        for st in &d.sdfg.states {
            for n in st.graph.node_ids() {
                if let Node::Library(LibraryNode::HaloExchange(_)) = st.graph.node(n) {
                    let mut f: Vec<String> = st
                        .graph
                        .in_edges(n)
                        .into_iter()
                        .map(|e| st.graph.edge(e).memlet.data.clone())
                        .collect();
                    f.sort();
                    out.push(f.join(","));
                }
            }
        }
        out.sort();
        out
    };
    let explicit = Dycore::on(&config(4, 3), Some([2, 2])).unwrap();
    assert_eq!(
        exchanges(&explicit),
        [
            "b",
            "fu,fv",
            "gx,gy",
            "h",
            "hs,qhs,us,vs",
            "lq",
            "lu,lv",
            "mu,mv",
            "pv",
            "q",
            "u,v"
        ]
    );
    // The halo analysis finds fewer: it exchanges `b`, `mu`, `mv` and `pv` together,
    // where the first call reads them away from the point; and `h` once more after the
    // hyperdiffusion branch (its other arm, without the exchange, is possible as far as
    // the analysis knows).
    let analysed = Dycore::with(&config(4, 3), program::Halos::Analysis([2, 2])).unwrap();
    assert_eq!(
        exchanges(&analysed),
        [
            "b,mu,mv,pv",
            "fu,fv",
            "gx,gy",
            "h",
            "h,u,v",
            "hs,qhs,us,vs",
            "lq",
            "lu,lv",
            "q"
        ]
    );
}

#[test]
fn the_time_step_on_mpi_ranks_is_one_ranks_bits() {
    // 11 x 8 over 2 x 2: blocks of 6 and 5 rows, so the ranks run two programs (their
    // static sizes differ) that agree on every exchange.
    let (cfg, grid, steps) = (config(11, 8), [2usize, 2], 3);
    let s0 = random_smooth(&cfg, 3);
    let dir = common::scratch("dycore");
    let mut programs = Vec::new();
    for r in 0..4 {
        let (local, oi, oj) = ranks::block(&cfg, grid, r);
        let d = Dycore::on(&local, Some([2, 2])).unwrap();
        let path = dir.join(format!("dycore.{r}.sdfg.json"));
        std::fs::write(&path, sdflow::ir::format::to_json(&d.sdfg)).unwrap();
        let b = d.bindings(&ranks::cut(&cfg, &s0, &local, oi, oj), steps);
        let mut arrays: BTreeMap<String, HostArray> = b.arrays.clone();
        for (k, v) in &b.symbols {
            arrays.insert(k.clone(), HostArray::scalar(*v));
        }
        sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
        programs.push((local, d, path));
    }
    // MPI's multiple-program form: each rank its own file.
    let groups: Vec<(usize, Vec<String>)> = programs
        .iter()
        .map(|(_, _, path)| {
            let (inp, outp) = (dir.join("in.{rank}.npz"), dir.join("out.{rank}.npz"));
            let args = [
                "run",
                &path.to_string_lossy(),
                "--ranks",
                "4",
                "--backend",
                "cpu",
                "--inputs",
                &inp.to_string_lossy(),
                "--outputs",
                &outp.to_string_lossy(),
            ];
            (1, args.iter().map(|s| s.to_string()).collect())
        })
        .collect();
    let Some(out) = common::mpirun(&groups, &dir.join("cache")) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Two variants (blocks of 6 and of 5 rows), each built by one rank, loaded by the
    // other rank that runs it.
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.matches("program 'dycore' built").count(), 2, "{said}");
    assert_eq!(
        said.matches("program 'dycore' loaded from the cache")
            .count(),
        2,
        "{said}"
    );
    let mut parts = Vec::new();
    for (r, (local, d, _)) in programs.iter().enumerate() {
        let got = Bindings {
            arrays: sdflow::npz::read_npz(&dir.join(format!("out.{r}.npz"))).unwrap(),
            ..Bindings::default()
        };
        let mut s = State::zeros(local);
        d.store(&got, &mut s);
        parts.extend(ranks::interior(local, &s));
    }
    let s = ranks::assemble(&cfg, grid, &parts);
    let one = Dycore::new(&cfg).unwrap();
    let mut s1 = s0.clone();
    one.run_interpreted(&mut s1, steps).unwrap();
    assert_eq!(ranks::differing(&cfg, &s, &s1), 0);
    std::fs::remove_dir_all(&dir).ok();
}
