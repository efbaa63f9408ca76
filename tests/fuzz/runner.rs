//! Running inputs: each under `catch_unwind` (the panic's message and place captured by
//! a hook, not printed), timed, with findings (panics, errors that fail the check,
//! inputs slower than the hang limit) saved as files that reproduce them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::corpus::Corpus;
use super::targets::{self, Input, Loader, Verdict};

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that records the message and place of panics raised
/// while [`run_one`] runs, and leaves every other panic to the previous hook.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let place = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg} (at {place})")));
            } else {
                previous(info);
            }
        }));
    });
}

/// What running one input gave.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The loader returned.
    Done(Verdict),
    /// The loader panicked: message and place.
    Panic(String),
}

/// Runs one input, catching a panic.
pub fn run_one(input: &Input, corpus: &Corpus, scratch: &Path) -> (Outcome, Duration) {
    install_hook();
    CATCHING.with(|c| c.set(true));
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| targets::run(input, corpus, scratch)));
    let took = start.elapsed();
    CATCHING.with(|c| c.set(false));
    let outcome = match r {
        Ok(v) => Outcome::Done(v),
        Err(_) => Outcome::Panic(
            LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panic without a message".into()),
        ),
    };
    (outcome, took)
}

/// A problem found: a panic, an error that fails the check, or a hang.
#[derive(Clone, Debug)]
pub struct Finding {
    /// `panic`, `bad-error` or `hang`.
    pub kind: &'static str,
    /// The loader.
    pub loader: Loader,
    /// The input's number in the campaign (reproduce with the same seed).
    pub index: u64,
    /// What happened.
    pub message: String,
    /// Where the input was saved.
    pub saved: Option<PathBuf>,
}

/// Counts of one loader.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Inputs run.
    pub inputs: u64,
    /// Inputs loaded.
    pub accepted: u64,
    /// Inputs refused with a good error.
    pub rejected: u64,
    /// Panics.
    pub panics: u64,
    /// Errors failing the check (and broken invariants).
    pub bad: u64,
    /// Inputs slower than the hang limit.
    pub hangs: u64,
    /// Total time in the loader.
    pub time: Duration,
    /// The slowest input: time, number, size in bytes.
    pub slowest: (Duration, u64, usize),
}

/// A campaign's settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seed of every input's generator.
    pub seed: u64,
    /// Inputs per loader.
    pub inputs: Vec<(Loader, u64)>,
    /// An input slower than this is a hang.
    pub hang_limit: Duration,
    /// Where findings are saved (`DIR/<loader>/<kind>-<seed>-<index>.<ext>`).
    pub save_dir: Option<PathBuf>,
    /// A scratch folder (the `.npz` loader reads from a file there).
    pub scratch: PathBuf,
    /// Print a progress line every this many inputs (0: never).
    pub progress: u64,
    /// Stop after this many findings.
    pub max_findings: usize,
    /// Number of the first input of each loader (to reproduce input `from` alone).
    pub from: u64,
}

/// A campaign's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Counts per loader.
    pub tallies: BTreeMap<Loader, Tally>,
    /// Every finding.
    pub findings: Vec<Finding>,
    /// Wall-clock time.
    pub elapsed: Duration,
}

/// The generator of input `index` of `loader` in a campaign seeded with `seed`: every
/// input can be made again alone.
pub fn rng_for(seed: u64, loader: Loader, index: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(((loader as u64) << 48) ^ index);
    r
}

/// Saves an input as a file that reproduces it; `.npz` inputs carry their program's
/// name before `@`, the tools' inputs their command line.
pub fn save(dir: &Path, input: &Input, stem: &str) -> Option<PathBuf> {
    let d = dir.join(input.loader.name());
    std::fs::create_dir_all(&d).ok()?;
    let name = match &input.program {
        Some(p) => format!("{p}@{stem}.{}", input.loader.ext()),
        None => format!("{stem}.{}", input.loader.ext()),
    };
    let path = d.join(name);
    std::fs::write(&path, &input.bytes).ok()?;
    Some(path)
}

/// Reads a saved input back (the loader from its folder's name).
pub fn load_saved(path: &Path) -> Option<Input> {
    let loader = Loader::from_name(&path.parent()?.file_name()?.to_string_lossy())?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    let program = match loader {
        Loader::Npz | Loader::Plot | Loader::Run | Loader::Bench => {
            Some(name.split_once('@')?.0.to_string())
        }
        _ => None,
    };
    Some(Input {
        loader,
        program,
        bytes: std::fs::read(path).ok()?,
    })
}

/// The input being run, for the watchdog: start time and a copy.
pub type Current = Arc<Mutex<Option<(Instant, Input)>>>;

/// Runs a campaign: for each loader, its number of inputs, one after another.
pub fn campaign(corpus: &Corpus, opts: &Options, current: Option<&Current>) -> Report {
    let start = Instant::now();
    let mut report = Report::default();
    let _ = std::fs::create_dir_all(&opts.scratch);
    let scratch = opts
        .scratch
        .join(format!("input-{}.npz", std::process::id()));
    // FUZZ_TRACE=1 names each input before it runs (to find one that aborts the process).
    let trace = std::env::var_os("FUZZ_TRACE").is_some();
    for &(loader, n) in &opts.inputs {
        let tally = report.tallies.entry(loader).or_default();
        for index in opts.from..opts.from + n {
            let mut rng = rng_for(opts.seed, loader, index);
            let input = super::generate::input(&mut rng, loader, corpus);
            if let Some(c) = current {
                *c.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Instant::now(), input.clone()));
            }
            if trace {
                eprintln!("{} #{index}: {} bytes", loader.name(), input.bytes.len());
                let _ = save(&opts.scratch, &input, "current");
            }
            let (outcome, took) = run_one(&input, corpus, &scratch);
            tally.inputs += 1;
            tally.time += took;
            if took > tally.slowest.0 {
                tally.slowest = (took, index, input.bytes.len());
            }
            let mut finding = |kind: &'static str, message: String| {
                let saved = opts
                    .save_dir
                    .as_ref()
                    .and_then(|d| save(d, &input, &format!("{kind}-{}-{index}", opts.seed)));
                report.findings.push(Finding {
                    kind,
                    loader,
                    index,
                    message,
                    saved,
                });
            };
            match outcome {
                Outcome::Done(Verdict::Accepted) => tally.accepted += 1,
                Outcome::Done(Verdict::Rejected(_)) => tally.rejected += 1,
                Outcome::Done(Verdict::Bad(m)) => {
                    tally.bad += 1;
                    finding("bad-error", m);
                }
                Outcome::Panic(m) => {
                    tally.panics += 1;
                    finding("panic", m);
                }
            }
            if took > opts.hang_limit {
                tally.hangs += 1;
                finding("hang", format!("took {took:.2?}"));
            }
            if opts.progress > 0 && (index + 1).is_multiple_of(opts.progress) {
                eprintln!(
                    "[{:>8.1?}] {} {}/{n}: {} accepted, {} rejected, {} panics, {} bad errors, {} hangs",
                    start.elapsed(),
                    loader.name(),
                    index + 1,
                    tally.accepted,
                    tally.rejected,
                    tally.panics,
                    tally.bad,
                    tally.hangs
                );
            }
            if report.findings.len() >= opts.max_findings {
                break;
            }
        }
        if report.findings.len() >= opts.max_findings {
            break;
        }
    }
    if let Some(c) = current {
        *c.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    let _ = std::fs::remove_file(&scratch);
    report.elapsed = start.elapsed();
    report
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>10} {:>22}",
            "loader",
            "inputs",
            "accepted",
            "rejected",
            "panics",
            "bad",
            "hangs",
            "time",
            "slowest (input, bytes)"
        )?;
        for (l, t) in &self.tallies {
            writeln!(
                f,
                "{:<6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>9.1?} {:>9.1?} (#{}, {} B)",
                l.name(),
                t.inputs,
                t.accepted,
                t.rejected,
                t.panics,
                t.bad,
                t.hangs,
                t.time,
                t.slowest.0,
                t.slowest.1,
                t.slowest.2
            )?;
        }
        writeln!(
            f,
            "total: {} inputs in {:.1?}",
            self.tallies.values().map(|t| t.inputs).sum::<u64>(),
            self.elapsed
        )?;
        for x in &self.findings {
            writeln!(
                f,
                "{} {} #{}: {}{}",
                x.kind,
                x.loader.name(),
                x.index,
                x.message,
                x.saved
                    .as_ref()
                    .map(|p| format!(" [saved {}]", p.display()))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}
