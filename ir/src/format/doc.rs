//! The serde document types of the JSON format, separate from the IR types.
//!
//! Every struct rejects unknown fields, so a typo in a hand-written file is an error
//! rather than a silently ignored key. Optional fields carry their defaults and are left
//! out on save when they hold them.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::data::Storage;
use crate::dataflow::Schedule;
use crate::dtype::DType;
use crate::memlet::Wcr;

/// An element type by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DTypeDoc {
    Bool,
    I32,
    I64,
    F32,
    F64,
}

impl From<DType> for DTypeDoc {
    fn from(d: DType) -> Self {
        match d {
            DType::Bool => DTypeDoc::Bool,
            DType::I32 => DTypeDoc::I32,
            DType::I64 => DTypeDoc::I64,
            DType::F32 => DTypeDoc::F32,
            DType::F64 => DTypeDoc::F64,
        }
    }
}

impl From<DTypeDoc> for DType {
    fn from(d: DTypeDoc) -> Self {
        match d {
            DTypeDoc::Bool => DType::Bool,
            DTypeDoc::I32 => DType::I32,
            DTypeDoc::I64 => DType::I64,
            DTypeDoc::F32 => DType::F32,
            DTypeDoc::F64 => DType::F64,
        }
    }
}

/// A map schedule by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ScheduleDoc {
    Sequential,
    #[default]
    CpuParallel,
    GpuDevice,
}

impl ScheduleDoc {
    pub(crate) fn is_default(&self) -> bool {
        *self == ScheduleDoc::CpuParallel
    }
}

impl From<Schedule> for ScheduleDoc {
    fn from(s: Schedule) -> Self {
        match s {
            Schedule::Sequential => ScheduleDoc::Sequential,
            Schedule::CpuParallel => ScheduleDoc::CpuParallel,
            Schedule::GpuDevice => ScheduleDoc::GpuDevice,
        }
    }
}

impl From<ScheduleDoc> for Schedule {
    fn from(s: ScheduleDoc) -> Self {
        match s {
            ScheduleDoc::Sequential => Schedule::Sequential,
            ScheduleDoc::CpuParallel => Schedule::CpuParallel,
            ScheduleDoc::GpuDevice => Schedule::GpuDevice,
        }
    }
}

/// A storage location by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StorageDoc {
    #[default]
    Host,
    Device,
    Local,
}

impl StorageDoc {
    pub(crate) fn is_default(&self) -> bool {
        *self == StorageDoc::Host
    }
}

impl From<Storage> for StorageDoc {
    fn from(s: Storage) -> Self {
        match s {
            Storage::Host => StorageDoc::Host,
            Storage::Device => StorageDoc::Device,
            Storage::Local => StorageDoc::Local,
        }
    }
}

impl From<StorageDoc> for Storage {
    fn from(s: StorageDoc) -> Self {
        match s {
            StorageDoc::Host => Storage::Host,
            StorageDoc::Device => Storage::Device,
            StorageDoc::Local => Storage::Local,
        }
    }
}

/// A write-conflict resolution by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WcrDoc {
    Sum,
    Prod,
    Min,
    Max,
}

impl From<Wcr> for WcrDoc {
    fn from(w: Wcr) -> Self {
        match w {
            Wcr::Sum => WcrDoc::Sum,
            Wcr::Prod => WcrDoc::Prod,
            Wcr::Min => WcrDoc::Min,
            Wcr::Max => WcrDoc::Max,
        }
    }
}

impl From<WcrDoc> for Wcr {
    fn from(w: WcrDoc) -> Self {
        match w {
            WcrDoc::Sum => Wcr::Sum,
            WcrDoc::Prod => Wcr::Prod,
            WcrDoc::Min => Wcr::Min,
            WcrDoc::Max => Wcr::Max,
        }
    }
}

/// A symbolic expression: an integer or expression text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SymDoc {
    Int(i64),
    Text(String),
}

impl Serialize for SymDoc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SymDoc::Int(v) => s.serialize_i64(*v),
            SymDoc::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for SymDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SymDoc;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or expression text")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SymDoc, E> {
                Ok(SymDoc::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SymDoc, E> {
                i64::try_from(v)
                    .map(SymDoc::Int)
                    .map_err(|_| E::custom(format!("integer {v} is too large")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SymDoc, E> {
                Ok(SymDoc::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Assignments in file order (a JSON object whose key order matters).
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct OrderedMap(pub(crate) Vec<(String, String)>);

impl Serialize for OrderedMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for OrderedMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of name: expression text")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<OrderedMap, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, String>()? {
                    if out.iter().any(|(q, _)| *q == k) {
                        return Err(de::Error::custom(format!("'{k}' is assigned twice")));
                    }
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A whole program (the top level also carries `sdflow_format`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SdfgDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sdflow_format: Option<serde_json::Value>,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) symbols: BTreeMap<String, SymbolDoc>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) arrays: BTreeMap<String, DataDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) arg_order: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) states: Vec<StateDoc>,
    #[serde(default = "BlockDoc::empty")]
    pub(crate) body: BlockDoc,
}

/// A symbol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SymbolDoc {
    pub(crate) dtype: DTypeDoc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) default: Option<i64>,
}

/// A data container: an array (`dtype` + `shape`) or a scalar (`scalar`).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DataDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scalar: Option<DTypeDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dtype: Option<DTypeDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shape: Option<Vec<SymDoc>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) transient: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) strides: Option<Vec<SymDoc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) storage: Option<StorageDoc>,
}

/// A state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateDoc {
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<NodeDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) edges: Vec<EdgeDoc>,
}

/// A dataflow node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NodeDoc {
    Access(String),
    Tasklet(TaskletDoc),
    Map(MapDoc),
    Nested(NestedDoc),
    Reduce(ReduceDoc),
    HaloExchange(HaloExchangeDoc),
}

/// A tasklet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskletDoc {
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) inputs: BTreeMap<String, DTypeDoc>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) outputs: BTreeMap<String, DTypeDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) code: Vec<String>,
}

/// A map scope with its body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MapDoc {
    pub(crate) label: String,
    pub(crate) params: Vec<String>,
    pub(crate) ranges: Vec<String>,
    #[serde(default, skip_serializing_if = "ScheduleDoc::is_default")]
    pub(crate) schedule: ScheduleDoc,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<NodeDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) edges: Vec<EdgeDoc>,
}

/// A nested SDFG call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NestedDoc {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) symbols: BTreeMap<String, SymDoc>,
    pub(crate) sdfg: Box<SdfgDoc>,
}

/// A reduction library node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReduceDoc {
    pub(crate) op: WcrDoc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) axes: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) identity: Option<String>,
}

/// A halo exchange library node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HaloExchangeDoc {
    pub(crate) decomposition: DecompositionDoc,
}

/// How the domain is split over ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum DecompositionDoc {
    Structured {
        ranks: [i64; 2],
        width: i64,
        #[serde(default)]
        periodic: [bool; 2],
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        corners: bool,
    },
    Unstructured {
        ranks: i64,
        global: String,
        owner: String,
    },
}

/// An edge between two nodes of the same graph, by position in `nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EdgeDoc {
    pub(crate) src: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) src_conn: Option<String>,
    pub(crate) dst: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dst_conn: Option<String>,
    pub(crate) memlet: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) other: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) wcr: Option<WcrDoc>,
}

/// A control-flow block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BlockDoc {
    State(u32),
    Seq(Vec<BlockDoc>),
    Loop(LoopDoc),
    If(IfDoc),
    Assign(OrderedMap),
}

impl BlockDoc {
    fn empty() -> BlockDoc {
        BlockDoc::Seq(Vec::new())
    }
}

/// A counted loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoopDoc {
    pub(crate) var: String,
    pub(crate) init: SymDoc,
    pub(crate) cond: SymDoc,
    pub(crate) update: SymDoc,
    pub(crate) body: Box<BlockDoc>,
}

/// A conditional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IfDoc {
    pub(crate) cond: SymDoc,
    pub(crate) then: Box<BlockDoc>,
    #[serde(
        default = "empty_box",
        rename = "else",
        skip_serializing_if = "is_empty_box"
    )]
    pub(crate) otherwise: Box<BlockDoc>,
}

fn empty_box() -> Box<BlockDoc> {
    Box::new(BlockDoc::empty())
}

fn is_empty_box(b: &BlockDoc) -> bool {
    *b == BlockDoc::empty()
}
