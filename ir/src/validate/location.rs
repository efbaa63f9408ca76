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

/// A [`Location`] that is built only when a problem is reported there: validation visits
/// every state, node and edge of a program, and almost none of them has a problem, so the
/// descriptions of a path are not formatted until one does.
#[derive(Clone, Copy)]
pub(crate) enum Loc<'a> {
    /// A state of the SDFG at the location.
    State(&'a Location, &'a str, usize),
    /// A node of a graph under a location.
    Node(&'a Loc<'a>, &'a crate::Dataflow, crate::NodeId),
    /// An edge of a graph under a location.
    Edge(&'a Loc<'a>, &'a crate::Dataflow, crate::EdgeId),
}

impl Loc<'_> {
    /// The location this stands for.
    pub(crate) fn build(&self) -> Location {
        match *self {
            Loc::State(l, name, index) => l.child(Segment::State {
                name: name.to_string(),
                index,
            }),
            Loc::Node(parent, g, n) => parent.build().child(Segment::Node {
                index: n.index(),
                description: g.node(n).describe(),
            }),
            Loc::Edge(parent, g, e) => {
                let (s, d) = g.endpoints(e);
                parent.build().child(Segment::Edge {
                    index: e.index(),
                    src: g.node(s).describe(),
                    dst: g.node(d).describe(),
                })
            }
        }
    }
}

/// Something a problem can be reported at: a built [`Location`] or a lazy [`Loc`].
pub(crate) trait Where {
    /// The location.
    fn location(&self) -> Location;
}

impl Where for Location {
    fn location(&self) -> Location {
        self.clone()
    }
}

/// A location computed when a problem needs it.
pub(crate) struct Lazy<F: Fn() -> Location>(pub F);

impl<F: Fn() -> Location> Where for Lazy<F> {
    fn location(&self) -> Location {
        (self.0)()
    }
}

impl Where for Loc<'_> {
    fn location(&self) -> Location {
        self.build()
    }
}
