//! The containers a pass sees while it rewrites one state: the program's, plus those it
//! has declared so far (map fusion and tiled fusion declare fused locals and slabs).

use sdflow_ir::{DataDesc, Sdfg};

/// The program's containers as one state's fusions see them: the program's, plus those
/// the state's fusions declared so far.
pub(crate) struct Scratch<'a> {
    pub(crate) sdfg: &'a Sdfg,
    pub(crate) added: Vec<(String, DataDesc)>,
}

impl Scratch<'_> {
    /// `base`, or `base_1`, `base_2`, … : the first name neither the program nor this
    /// state uses.
    pub(crate) fn fresh(&self, base: &str) -> String {
        let free = |n: &str| {
            !self.sdfg.arrays.contains_key(n)
                && !self.sdfg.symbols.contains_key(n)
                && self.added.iter().all(|(a, _)| a != n)
        };
        if free(base) {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| free(n))
            .expect("an unused name exists")
    }

    pub(crate) fn declare(&mut self, name: String, desc: DataDesc) {
        self.added.push((name, desc));
    }
}

impl sdflow_ir::Descriptors for Scratch<'_> {
    fn desc(&self, name: &str) -> Option<&DataDesc> {
        self.added
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
            .or_else(|| self.sdfg.arrays.get(name))
    }
}
