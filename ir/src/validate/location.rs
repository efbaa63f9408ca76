//! Where a problem is: a path from the program down to an element.

use std::fmt;

/// One step of a [`Location`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Segment {
    /// An SDFG (the program, or a nested one): `sdfg 'lap'`.
    Sdfg(String),
    /// A state: `state 'main' (#0)`.
    State {
        /// The state's name.
        name: String,
        /// Its index in `states`.
        index: usize,
    },
    /// A node (maps nest: the map scope path is a chain of these): `map 'stencil' (node 2)`.
    Node {
        /// The node's index in its graph.
        index: usize,
        /// [`crate::Node::describe`].
        description: String,
    },
    /// An edge: `edge 3 (access 'u' -> tasklet 't')`.
    Edge {
        /// The edge's index in its graph.
        index: usize,
        /// Description of the source node.
        src: String,
        /// Description of the destination node.
        dst: String,
    },
    /// A container declaration: `array 'u'`.
    Array(String),
    /// A symbol declaration: `symbol 'N'`.
    Symbol(String),
    /// A control-flow block: `loop 't'`, `if 'cond'`, `assign 'x'`.
    Control(String),
    /// The `arg_order` list: `arg_order`.
    ArgOrder,
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Segment::Sdfg(n) => write!(f, "sdfg '{n}'"),
            Segment::State { name, index } => write!(f, "state '{name}' (#{index})"),
            Segment::Node { index, description } => write!(f, "{description} (node {index})"),
            Segment::Edge { index, src, dst } => write!(f, "edge {index} ({src} -> {dst})"),
            Segment::Array(n) => write!(f, "array '{n}'"),
            Segment::Symbol(n) => write!(f, "symbol '{n}'"),
            Segment::Control(d) => f.write_str(d),
            Segment::ArgOrder => f.write_str("arg_order"),
        }
    }
}

/// A path from the outermost SDFG to the element a problem is about; displayed as its
/// segments joined by ` > `, e.g.
/// `sdfg 'lap' > state 'main' (#0) > map 'stencil' (node 2) > edge 3 (access 'u' -> tasklet 't')`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Location {
    /// The steps, outermost first.
    pub segments: Vec<Segment>,
}

impl Location {
    /// This location extended by one step.
    pub fn child(&self, segment: Segment) -> Location {
        let mut segments = self.segments.clone();
        segments.push(segment);
        Location { segments }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}
