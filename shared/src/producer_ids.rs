//! Producer-id allocation on the shared volume.
//!
//! Ids are handed out from blocks; a block is claimed by exclusive create of
//! `__cluster/producer-ids/<blockStart:020>`. Racing claimers of the same block see `EEXIST` and
//! move on to the next one, so there is no shared counter to read-modify-write.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::atomic_file::create_exclusive;
use crate::fs::FsRef;
use crate::layout::Layout;
use crate::names::{parse_producer_id_block_name, producer_id_block_name};
use crate::{Error, Result};

/// Default number of ids in a block.
pub const DEFAULT_BLOCK_SIZE: i64 = 1000;

/// Hands out producer ids from blocks claimed on the volume.
#[derive(Debug)]
pub struct ProducerIdAllocator {
    fs: FsRef,
    dir: PathBuf,
    block_size: i64,
    /// `(next, end)` of the block in use, end exclusive.
    current: Mutex<Option<(i64, i64)>>,
}

impl ProducerIdAllocator {
    /// An allocator claiming blocks of `block_size` ids under `layout`'s producer-ids directory.
    pub fn new(fs: FsRef, layout: &Layout, block_size: i64) -> Self {
        ProducerIdAllocator {
            fs,
            dir: layout.producer_ids_dir(),
            block_size: block_size.max(1),
            current: Mutex::new(None),
        }
    }

    /// The next unused producer id, claiming a fresh block when the current one is used up.
    pub fn allocate(&self) -> Result<i64> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let (next, end) = match *current {
            Some((next, end)) if next < end => (next, end),
            _ => {
                let start = self.claim_block()?;
                (start, start + self.block_size)
            }
        };
        *current = Some((next + 1, end));
        Ok(next)
    }

    fn claim_block(&self) -> Result<i64> {
        let fs = &*self.fs;
        fs.create_dir_all(&self.dir)
            .map_err(|e| Error::io("mkdir", &self.dir, e))?;
        let entries = fs
            .list_dir(&self.dir)
            .map_err(|e| Error::io("list", &self.dir, e))?;
        let mut highest = None;
        for entry in entries {
            let start = parse_producer_id_block_name(&entry.name)?;
            highest = highest.max(Some(start));
        }
        let mut candidate = match highest {
            Some(h) => h.checked_add(self.block_size),
            None => Some(0),
        };
        while let Some(start) = candidate.filter(|s| s.checked_add(self.block_size).is_some()) {
            let path = self.dir.join(producer_id_block_name(start)?);
            if create_exclusive(fs, &path, b"")? {
                return Ok(start);
            }
            candidate = start.checked_add(self.block_size);
        }
        Err(Error::ProducerIdsExhausted {
            dir: self.dir.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn allocators_sharing_a_volume_never_hand_out_the_same_id() {
        let fs: FsRef = Arc::new(MemFs::new());
        let layout = Layout::new("/data");
        let a = ProducerIdAllocator::new(fs.clone(), &layout, 3);
        let b = ProducerIdAllocator::new(fs.clone(), &layout, 3);
        let mut seen = HashSet::new();
        for _ in 0..10 {
            assert!(seen.insert(a.allocate().unwrap()));
            assert!(seen.insert(b.allocate().unwrap()));
        }
        let blocks = fs.list_dir(&layout.producer_ids_dir()).unwrap();
        assert_eq!(blocks.len(), 8);
    }
}
