//! Typed indices and the arenas they index, so that a block index can never be
//! used where a value index is expected.

use std::fmt;
use std::marker::PhantomData;

/// A dense `u32` index into an [`Arena`].
pub trait EntityRef: Copy + Eq + Ord + std::hash::Hash + fmt::Debug {
    /// Builds the index from its position in the arena.
    fn new(index: usize) -> Self;
    /// The position of the entity in its arena.
    fn index(self) -> usize;
}

/// Declares a `u32` newtype index that displays with the given prefix.
#[macro_export]
macro_rules! entity {
    ($(#[$attr:meta])* $name:ident, $prefix:literal) => {
        $(#[$attr])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u32);

        impl $crate::entity::EntityRef for $name {
            fn new(index: usize) -> Self {
                // Arenas never grow past u32::MAX entities: `Arena::push` checks.
                $name(index as u32)
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

/// A vector of `V` indexed by `K`.
#[derive(Clone, PartialEq)]
pub struct Arena<K: EntityRef, V> {
    items: Vec<V>,
    _key: PhantomData<K>,
}

impl<K: EntityRef, V> Default for Arena<K, V> {
    fn default() -> Self {
        Arena { items: Vec::new(), _key: PhantomData }
    }
}

impl<K: EntityRef, V: fmt::Debug> fmt::Debug for Arena<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: EntityRef, V> Arena<K, V> {
    /// An empty arena.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty arena with room for `n` items (a rebuild knows how many it will push:
    /// growing by doubling copies every item and touches twice the memory).
    pub fn with_capacity(n: usize) -> Self {
        Arena { items: Vec::with_capacity(n), _key: PhantomData }
    }

    /// Appends an item and returns its index.
    pub fn push(&mut self, value: V) -> K {
        let key = K::new(self.items.len());
        assert!(self.items.len() < u32::MAX as usize, "arena overflow");
        self.items.push(value);
        key
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The item at `key`, if the key is in range.
    pub fn get(&self, key: K) -> Option<&V> {
        self.items.get(key.index())
    }

    /// The item at `key` for mutation, if the key is in range.
    pub fn get_mut(&mut self, key: K) -> Option<&mut V> {
        self.items.get_mut(key.index())
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = K> + ExactSizeIterator + use<K, V> {
        (0..self.items.len()).map(K::new)
    }

    /// Every (key, item) pair, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (K, &V)> + ExactSizeIterator {
        self.items.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }

    /// The values in key order, to change in place.
    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, V> {
        self.items.iter_mut()
    }

    /// Every item, in order.
    pub fn values(&self) -> std::slice::Iter<'_, V> {
        self.items.iter()
    }

    /// Whether `key` indexes an item of this arena.
    pub fn contains(&self, key: K) -> bool {
        key.index() < self.items.len()
    }
}

impl<K: EntityRef, V> std::ops::Index<K> for Arena<K, V> {
    type Output = V;
    fn index(&self, key: K) -> &V {
        &self.items[key.index()]
    }
}

impl<K: EntityRef, V> std::ops::IndexMut<K> for Arena<K, V> {
    fn index_mut(&mut self, key: K) -> &mut V {
        &mut self.items[key.index()]
    }
}

/// A side table with one `V` per entity of some arena, defaulting to `V::default()`.
#[derive(Clone, Debug)]
pub struct SecondaryMap<K: EntityRef, V: Clone> {
    items: Vec<V>,
    default: V,
    _key: PhantomData<K>,
}

impl<K: EntityRef, V: Clone + Default> Default for SecondaryMap<K, V> {
    fn default() -> Self {
        Self::with_default(V::default())
    }
}

impl<K: EntityRef, V: Clone> SecondaryMap<K, V> {
    /// A map whose missing entries read as `default`.
    pub fn with_default(default: V) -> Self {
        SecondaryMap { items: Vec::new(), default, _key: PhantomData }
    }

    /// A map whose missing entries read as `default`, with the first `n` entries
    /// present (so that setting them does not grow the map step by step).
    pub fn with_default_for(default: V, n: usize) -> Self {
        SecondaryMap { items: vec![default.clone(); n], default, _key: PhantomData }
    }

    /// Sets the entry of `key`.
    pub fn set(&mut self, key: K, value: V) {
        let i = key.index();
        if i >= self.items.len() {
            self.items.resize(i + 1, self.default.clone());
        }
        self.items[i] = value;
    }
}

impl<K: EntityRef, V: Clone> std::ops::Index<K> for SecondaryMap<K, V> {
    type Output = V;
    fn index(&self, key: K) -> &V {
        self.items.get(key.index()).unwrap_or(&self.default)
    }
}
