//! IR types, interned in a per-module table so that a type is a `Copy` index.

use crate::entity::Arena;
use std::collections::HashMap;
use std::fmt;

crate::entity!(
    /// An interned type of a [`TypeTable`].
    TypeId,
    "t"
);
crate::entity!(
    /// A struct declaration of a [`TypeTable`].
    StructId,
    "struct"
);

/// The element type of an array.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// 64-bit float.
    F64,
    /// 64-bit signed integer.
    I64,
    /// Boolean.
    Bool,
}

impl Scalar {
    /// The scalar's spelling in source and IR text.
    pub fn name(self) -> &'static str {
        match self {
            Scalar::F64 => "f64",
            Scalar::I64 => "i64",
            Scalar::Bool => "bool",
        }
    }
}

/// A type of the IR.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A scalar (`f64`, `i64`, `bool`).
    Scalar(Scalar),
    /// A mutable, address-identified array of the given rank (1 to 3).
    Array {
        /// Element type.
        elem: Scalar,
        /// Number of dimensions.
        rank: u8,
    },
    /// A mutable cell, address-identified.
    Ref(TypeId),
    /// An immutable tuple; the empty tuple is the unit type `()`.
    Tuple(Vec<TypeId>),
    /// A record: immutable (value-identified) or `mut` (address-identified).
    Struct(StructId),
    /// A growable last-in first-out buffer of values, address-identified. Programs cannot
    /// name it: derived forward passes push onto stacks what their reverse passes pop.
    Stack(TypeId),
}

/// A struct declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct StructDef {
    /// The struct's name.
    pub name: String,
    /// Whether it is a `mut struct` (address-identified, fields assignable).
    pub mutable: bool,
    /// Field names and types, in declaration order.
    pub fields: Vec<(String, TypeId)>,
}

impl StructDef {
    /// The position of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|(n, _)| n == name)
    }
}

/// The interned types and struct declarations of a module.
#[derive(Clone, Debug)]
pub struct TypeTable {
    types: Arena<TypeId, Type>,
    interned: HashMap<Type, TypeId>,
    structs: Arena<StructId, StructDef>,
    struct_names: HashMap<String, StructId>,
}

impl Default for TypeTable {
    fn default() -> Self {
        let mut table = TypeTable {
            types: Arena::new(),
            interned: HashMap::new(),
            structs: Arena::new(),
            struct_names: HashMap::new(),
        };
        // The order fixes the constants below.
        table.intern(Type::Scalar(Scalar::F64));
        table.intern(Type::Scalar(Scalar::I64));
        table.intern(Type::Scalar(Scalar::Bool));
        table.intern(Type::Tuple(Vec::new()));
        table
    }
}

impl TypeTable {
    /// `f64`.
    pub const F64: TypeId = TypeId(0);
    /// `i64`.
    pub const I64: TypeId = TypeId(1);
    /// `bool`.
    pub const BOOL: TypeId = TypeId(2);
    /// `()`.
    pub const UNIT: TypeId = TypeId(3);

    /// A table holding only the built-in types.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `ty`, adding it if new.
    pub fn intern(&mut self, ty: Type) -> TypeId {
        if let Some(&id) = self.interned.get(&ty) {
            return id;
        }
        let id = self.types.push(ty.clone());
        self.interned.insert(ty, id);
        id
    }

    /// The type behind `id`.
    pub fn get(&self, id: TypeId) -> &Type {
        &self.types[id]
    }

    /// The type behind `id`, or `None` if `id` is not of this table.
    pub fn try_get(&self, id: TypeId) -> Option<&Type> {
        self.types.get(id)
    }

    /// The id of a scalar type.
    pub fn scalar(s: Scalar) -> TypeId {
        match s {
            Scalar::F64 => Self::F64,
            Scalar::I64 => Self::I64,
            Scalar::Bool => Self::BOOL,
        }
    }

    /// The id of an array type.
    pub fn array(&mut self, elem: Scalar, rank: u8) -> TypeId {
        self.intern(Type::Array { elem, rank })
    }

    /// Declares a struct; its fields can be filled in later with [`TypeTable::struct_def_mut`].
    pub fn declare_struct(&mut self, def: StructDef) -> (StructId, TypeId) {
        let name = def.name.clone();
        let sid = self.structs.push(def);
        self.struct_names.insert(name, sid);
        (sid, self.intern(Type::Struct(sid)))
    }

    /// The struct called `name`.
    pub fn struct_by_name(&self, name: &str) -> Option<StructId> {
        self.struct_names.get(name).copied()
    }

    /// A struct's declaration.
    pub fn struct_def(&self, id: StructId) -> &StructDef {
        &self.structs[id]
    }

    /// A struct's declaration, for filling in its fields.
    pub fn struct_def_mut(&mut self, id: StructId) -> &mut StructDef {
        &mut self.structs[id]
    }

    /// Every struct declaration, in declaration order.
    pub fn structs(&self) -> impl Iterator<Item = (StructId, &StructDef)> {
        self.structs.iter()
    }

    /// If `id` is an array type, its element type and rank.
    pub fn as_array(&self, id: TypeId) -> Option<(Scalar, u8)> {
        match self.try_get(id)? {
            Type::Array { elem, rank } => Some((*elem, *rank)),
            _ => None,
        }
    }

    /// If `id` is a scalar type, which one.
    pub fn as_scalar(&self, id: TypeId) -> Option<Scalar> {
        match self.try_get(id)? {
            Type::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    /// If `id` is a struct type, its declaration.
    pub fn as_struct(&self, id: TypeId) -> Option<(StructId, &StructDef)> {
        match self.try_get(id)? {
            Type::Struct(s) => Some((*s, self.structs.get(*s)?)),
            _ => None,
        }
    }

    /// Whether values of this type are identified by address (arrays, refs, mut structs).
    pub fn is_address(&self, id: TypeId) -> bool {
        match self.try_get(id) {
            Some(Type::Array { .. }) | Some(Type::Ref(_)) | Some(Type::Stack(_)) => true,
            Some(Type::Struct(s)) => self.structs.get(*s).is_some_and(|d| d.mutable),
            _ => false,
        }
    }

    /// A displayable spelling of the type, as in source and IR text.
    pub fn display(&self, id: TypeId) -> DisplayType<'_> {
        DisplayType { table: self, id }
    }

    /// The number of interned types.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether the table is empty (it never is: the built-in types are always there).
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
}

/// See [`TypeTable::display`].
pub struct DisplayType<'a> {
    table: &'a TypeTable,
    id: TypeId,
}

impl fmt::Display for DisplayType<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(ty) = self.table.try_get(self.id) else {
            return write!(f, "<invalid {:?}>", self.id);
        };
        match ty {
            Type::Scalar(s) => f.write_str(s.name()),
            Type::Array { elem, rank } => {
                write!(f, "{}[", elem.name())?;
                for _ in 1..*rank {
                    f.write_str(",")?;
                }
                f.write_str("]")
            }
            Type::Ref(inner) => write!(f, "ref<{}>", self.table.display(*inner)),
            Type::Stack(inner) => write!(f, "stack<{}>", self.table.display(*inner)),
            Type::Tuple(items) => {
                f.write_str("(")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", self.table.display(*t))?;
                }
                if items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            Type::Struct(s) => match self.table.structs.get(*s) {
                Some(def) => f.write_str(&def.name),
                None => write!(f, "<invalid {s:?}>"),
            },
        }
    }
}
