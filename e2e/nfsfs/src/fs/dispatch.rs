//! The FUSE entry points: apply the injected delay, call the operation, send the reply.
//! Every entry and attribute reply carries the configured TTL (0 by default, so the kernel
//! caches nothing and each access reaches the "server").

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    BsdFileFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::MountFs;
use super::data::SetAttr;

impl MountFs {
    fn open_flags(&self) -> FopenFlags {
        if self.volume.options.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }
}

fn owner(req: &Request) -> (u32, u32) {
    (req.uid(), req.gid())
}

impl Filesystem for MountFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // mmap (the storage engine maps index files) with FOPEN_DIRECT_IO needs this flag.
        for wanted in [
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            InitFlags::FUSE_AUTO_INVAL_DATA,
        ] {
            if let Err(missing) = config.add_capabilities(wanted) {
                tracing::warn!(mount = %self.name, ?missing, "kernel lacks a FUSE capability");
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let ghosts = self.ghost_count();
        if ghosts > 0 {
            // As when an NFS client goes away with files open: the ghosts stay on the server.
            tracing::info!(mount = %self.name, ghosts, "unmounted with silly-renamed files open");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.enter();
        match self.do_lookup(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.do_forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.enter();
        match self.do_getattr(ino.0, fh.map(|f| f.0)) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.enter();
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self.do_setattr(ino.0, fh.map(|f| f.0), set) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.enter();
        match self.do_readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.enter();
        match self.do_mkdir(parent.0, name, mode & !umask, owner(req)) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter();
        match self.do_unlink(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter();
        match self.do_rmdir(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.enter();
        match self.do_symlink(parent.0, link_name, target, owner(req)) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.do_rename(parent.0, name, newparent.0, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.enter();
        match self.do_link(ino.0, newparent.0, newname) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.enter();
        match self.do_open(ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.enter();
        match self.do_read(fh.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.enter();
        match self.do_write(fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes go straight to the backing file, so there is nothing to flush at close.
        self.enter();
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.enter();
        self.do_release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.do_fsync(fh.0, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.enter();
        match self.do_opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.enter();
        let entries = match self.dir_entries(ino.0, fh.0, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in entries.iter().enumerate().skip(start) {
            // The offset of an entry is where the next READDIR resumes.
            if reply.add(INodeNo(e.ino.max(1)), (i + 1) as u64, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.enter();
        self.do_releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.do_fsyncdir(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.enter();
        match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.enter();
        match self.do_create(parent.0, name, mode & !umask, flags, owner(req)) {
            Ok((attr, fh)) => reply.created(
                &self.ttl(),
                &attr,
                Generation(0),
                FileHandle(fh),
                self.open_flags(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.do_fallocate(fh.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
