//! GT4Py's conventions in the programs it lowers to SDFGs, which the importer states in
//! sdflow's terms so that nothing downstream needs to know them.

use sdflow_ir::Sdfg;

/// GT4Py gives a field argument's index range `[r0, r1)` in each dimension as two
/// symbols, `__<field>_<Dim>_range_0` and `__<field>_<Dim>_range_1`, of which an array
/// passed fixes only the difference. A field made without an origin starts at index 0 of
/// its domain, so each such `range_0` of an argument's shape gets the default 0
/// ([`sdflow_ir::Symbol::default`]): a caller passing plain arrays need not give it, and
/// one that gives it moves the range instead.
pub(super) fn default_field_origins(sdfg: &mut Sdfg) {
    let mut origins = Vec::new();
    for (name, desc) in sdfg.non_transients() {
        let prefix = format!("__{name}_");
        for s in desc.shape().iter().flat_map(|e| e.free_symbols()) {
            if s.starts_with(&prefix) && s.ends_with("_range_0") {
                origins.push(s);
            }
        }
    }
    for s in origins {
        if let Some(sym) = sdfg.symbols.get_mut(&s)
            && sym.value.is_none()
            && sym.dtype.is_int()
        {
            sym.default = Some(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use sdflow_ir::{DType, SymExpr, Symbol, builder::SdfgBuilder};

    #[test]
    fn only_an_arguments_own_range_origins_default_to_zero() {
        let mut b = SdfgBuilder::new("p");
        let shape = |t: &str| vec![SymExpr::parse(t).unwrap()];
        b.array(
            "w",
            DType::F64,
            shape("__w_Cell_range_1 - __w_Cell_range_0"),
        );
        // Another field's origin in w's shape is not w's origin.
        b.array(
            "v",
            DType::F64,
            shape("__w_Edge_range_1 - __w_Edge_range_0 + __z_Cell_range_0"),
        );
        let mut sdfg = b.build();
        for s in [
            "__w_Cell_range_0",
            "__w_Cell_range_1",
            "__w_Edge_range_0",
            "__w_Edge_range_1",
            "__z_Cell_range_0",
        ] {
            sdfg.symbols.insert(s.into(), Symbol::new(DType::I64));
        }
        super::default_field_origins(&mut sdfg);
        let defaults: Vec<(&str, Option<i64>)> = sdfg
            .symbols
            .iter()
            .map(|(k, s)| (k.as_str(), s.default))
            .collect();
        assert_eq!(
            defaults,
            [
                ("__w_Cell_range_0", Some(0)),
                ("__w_Cell_range_1", None),
                ("__w_Edge_range_0", None),
                ("__w_Edge_range_1", None),
                ("__z_Cell_range_0", None),
            ]
        );
    }
}
