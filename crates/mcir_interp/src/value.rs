//! Runtime values of the interpreter. Address-identified data (arrays, refs, mut
//! structs) is shared through `Rc`, so aliasing in the program is aliasing here;
//! value-identified data (scalars, tuples, structs) is copied.

use std::cell::RefCell;
use std::rc::Rc;

/// The elements of an array, by element type.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData {
    /// `f64` elements.
    F64(Vec<f64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `bool` elements.
    Bool(Vec<bool>),
}

impl ArrayData {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayData::F64(v) => v.len(),
            ArrayData::I64(v) => v.len(),
            ArrayData::Bool(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mutable array: shape (row-major) and elements.
#[derive(Debug)]
pub struct Array {
    /// Extent of each dimension.
    pub shape: Vec<usize>,
    /// Elements in row-major order; `shape.iter().product() == data.len()`.
    pub data: RefCell<ArrayData>,
}

/// A shared array.
pub type ArrayRef = Rc<Array>;

impl Array {
    /// A new shared array. The caller guarantees that the shape fits the data.
    pub fn new(shape: Vec<usize>, data: ArrayData) -> ArrayRef {
        Rc::new(Array { shape, data: RefCell::new(data) })
    }
}

/// A runtime value.
#[derive(Clone, Debug)]
pub enum Val {
    /// `f64`
    F64(f64),
    /// `i64`
    I64(i64),
    /// `bool`
    Bool(bool),
    /// An array (shared).
    Array(ArrayRef),
    /// A ref cell (shared).
    Ref(Rc<RefCell<Val>>),
    /// A tuple or an immutable struct: its fields in order.
    Agg(Rc<[Val]>),
    /// A `mut struct` (shared): its fields in order.
    Mut(Rc<RefCell<Vec<Val>>>),
    /// A stack of the derived passes (shared).
    Stack(Rc<RefCell<Vec<Val>>>),
    /// No value yet (registers before their definition); also `()`.
    Unit,
}

impl Val {
    /// A fresh ref cell.
    pub fn new_ref(v: Val) -> Val {
        Val::Ref(Rc::new(RefCell::new(v)))
    }

    /// A fresh mut struct.
    pub fn new_mut(fields: Vec<Val>) -> Val {
        Val::Mut(Rc::new(RefCell::new(fields)))
    }
}

impl Val {
    /// An `f64` array of the given shape (row-major), or `None` if the shape does not
    /// hold exactly `data.len()` elements or has more than three dimensions.
    pub fn f64_array(data: Vec<f64>, shape: &[usize]) -> Option<Val> {
        let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
        if count != data.len() || shape.is_empty() || shape.len() > 3 {
            return None;
        }
        Some(Val::Array(Array::new(shape.to_vec(), ArrayData::F64(data))))
    }

    /// A rank-1 `f64` array.
    pub fn vector(data: Vec<f64>) -> Val {
        let n = data.len();
        Val::Array(Array::new(vec![n], ArrayData::F64(data)))
    }

    /// The number, if this is an `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Val::F64(x) => Some(*x),
            _ => None,
        }
    }

    /// The elements, if this is an `f64` array (a copy).
    pub fn to_f64_vec(&self) -> Option<Vec<f64>> {
        match self {
            Val::Array(a) => match &*a.data.borrow() {
                ArrayData::F64(d) => Some(d.clone()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Values nest (a recursive function's record holds the records of its recursive calls,
/// one level per call), and the compiler-made drop of a nested value recurses once per
/// level: deep enough, that overflows the stack. A value that is the last holder of
/// nested values hands them to a work list instead, so dropping never goes deeper than
/// one level at a time.
impl Drop for Val {
    fn drop(&mut self) {
        let mut pending = Vec::new();
        take_nested(self, &mut pending);
        while let Some(mut v) = pending.pop() {
            take_nested(&mut v, &mut pending);
        }
    }
}

/// Whether `v` may hold other values.
fn nests(v: &Val) -> bool {
    matches!(v, Val::Ref(_) | Val::Agg(_) | Val::Mut(_) | Val::Stack(_))
}

/// Moves the values `v` alone holds, that may hold others, into `out`.
fn take_nested(v: &mut Val, out: &mut Vec<Val>) {
    let mut take = |x: &mut Val| {
        if nests(x) {
            out.push(std::mem::replace(x, Val::Unit));
        }
    };
    match v {
        Val::Agg(rc) => {
            if let Some(fields) = Rc::get_mut(rc) {
                fields.iter_mut().for_each(take);
            }
        }
        Val::Ref(rc) => {
            if let Some(cell) = Rc::get_mut(rc) {
                take(cell.get_mut());
            }
        }
        Val::Mut(rc) | Val::Stack(rc) => {
            if let Some(cell) = Rc::get_mut(rc) {
                cell.get_mut().iter_mut().for_each(take);
            }
        }
        _ => {}
    }
}
