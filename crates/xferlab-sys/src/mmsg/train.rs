//! The send side of a DCCP flow's socket: packet buffers and message
//! headers for sendmmsg, built once; the connection writes each packet
//! straight into its place. Packets of one length that follow each other
//! may travel as one message with UDP_SEGMENT (a "train"): the kernel cuts
//! it into the same datagrams, each with its own UDP header and checksum,
//! after one pass through the socket layer and the route.

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsFd, AsRawFd};

/// Bytes one UDP_SEGMENT send may carry: a UDP payload's limit (65,535
/// minus the IPv4 and UDP headers).
const MAX_TRAIN_BYTES: usize = 65_507;
/// A control message holding one u16 (UDP_SEGMENT's segment size).
// SAFETY: CMSG_SPACE is a pure size computation.
const CTRL: usize = unsafe { libc::CMSG_SPACE(2) } as usize;

pub struct TxBatch {
    cap: usize,
    /// Packets one train holds at most.
    max_train: usize,
    /// Whether trains may form (UDP carrier with --gso, and the kernel
    /// has not refused UDP_SEGMENT).
    gso: bool,
    /// Packets back to back: each slot handed out has `cap` bytes, and
    /// a packet written takes only its length.
    bufs: Vec<u8>,
    /// Bytes and packets written.
    used: usize,
    packets: usize,
    /// One message per train (one packet without GSO): where it starts in
    /// `bufs` and its iovec (whose pointer flush() sets from that), its
    /// packets' length and count, its UDP_SEGMENT control message.
    off: Vec<usize>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    seg: Vec<usize>,
    count: Vec<usize>,
    ctrl: Vec<u8>,
    /// Messages built, and how many of them the socket took so far.
    built: usize,
    sent: usize,
}

// SAFETY: the raw pointers inside point into the struct's own heap
// buffers, which never move after construction and go with it.
unsafe impl Send for TxBatch {}

impl TxBatch {
    /// Room for `n` packets of at most `cap` bytes each; with `gso`,
    /// trains of up to `max_train` packets.
    pub fn new(cap: usize, n: usize, gso: bool, max_train: usize) -> Self {
        let mut b = TxBatch {
            cap,
            max_train,
            gso,
            bufs: vec![0u8; cap * n],
            used: 0,
            packets: 0,
            off: vec![0; n],
            iovs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                n
            ],
            msgs: Vec::with_capacity(n),
            seg: vec![0; n],
            count: vec![0; n],
            ctrl: vec![0u8; CTRL * n],
            built: 0,
            sent: 0,
        };
        for _ in 0..n {
            // SAFETY: an all-zero mmsghdr is valid (no name, no control).
            let mut m: libc::mmsghdr = unsafe { zeroed() };
            m.msg_hdr.msg_iovlen = 1;
            b.msgs.push(m);
        }
        b
    }

    /// The next free slot, None when the batch is full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        // `used` <= packets * cap, so a free packet has its cap bytes.
        (self.packets < self.seg.len()).then(|| &mut self.bufs[self.used..self.used + self.cap])
    }

    /// Takes the `len` bytes just written into the slot.
    ///
    /// # Panics
    ///
    /// If there is no free slot or `len` exceeds it: the kernel would
    /// read past the packet's buffer.
    pub fn commit(&mut self, len: usize) {
        assert!(
            self.packets < self.seg.len() && len <= self.cap,
            "a commit of {len} bytes without a slot of that size"
        );
        let t = self.built.wrapping_sub(1);
        let joins = self.gso
            && self.built > self.sent
            && self.seg[t] == len
            && self.count[t] < self.max_train
            && self.iovs[t].iov_len + len <= MAX_TRAIN_BYTES;
        if joins {
            self.iovs[t].iov_len += len;
            self.count[t] += 1;
        } else {
            let t = self.built;
            self.off[t] = self.used;
            self.iovs[t].iov_len = len;
            self.seg[t] = len;
            self.count[t] = 1;
            self.built += 1;
        }
        self.used += len;
        self.packets += 1;
    }

    /// Packets written and not yet cleared.
    pub fn filled(&self) -> usize {
        self.packets
    }

    /// Whether written packets wait for room in the socket.
    pub fn pending(&self) -> bool {
        self.sent < self.built
    }

    pub fn clear(&mut self) {
        self.used = 0;
        self.packets = 0;
        self.built = 0;
        self.sent = 0;
    }

    /// Whether trains may still form.
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Sends what is written and not yet sent; returns how many messages
    /// the socket took (a full socket buffer takes fewer, or none). An
    /// error leaves the batch as it was.
    pub fn flush(&mut self, fd: impl AsFd) -> io::Result<usize> {
        if !self.pending() {
            self.clear();
            return Ok(0);
        }
        // Every pointer from one base pointer per buffer, taken after the
        // last slot handed out (see the module's comment).
        let bufs = self.bufs.as_mut_ptr();
        for t in self.sent..self.built {
            self.iovs[t].iov_base = bufs.wrapping_add(self.off[t]).cast();
        }
        let (iovs, ctrl) = (self.iovs.as_mut_ptr(), self.ctrl.as_mut_ptr());
        for t in self.sent..self.built {
            self.msgs[t].msg_hdr.msg_iov = iovs.wrapping_add(t);
            self.set_control(t, ctrl);
        }
        let n = self.built - self.sent;
        // SAFETY: the loops above pointed msgs[sent..built] at live
        // iovecs, buffers and control messages (see the module's comment).
        let r = unsafe {
            libc::sendmmsg(
                fd.as_fd().as_raw_fd(),
                self.msgs[self.sent..].as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.sent += r as usize;
        if !self.pending() {
            self.clear();
        }
        Ok(r as usize)
    }

    /// No more trains: a kernel or route without UDP GSO refused one. The
    /// unsent trains become one message per packet.
    pub fn refuse_gso(&mut self) {
        self.gso = false;
        self.split_trains();
    }

    /// Message `t`'s UDP_SEGMENT control message, where it is a train, in
    /// its place in the control buffer that starts at `ctrl`.
    fn set_control(&mut self, t: usize, ctrl: *mut u8) {
        let hdr = &mut self.msgs[t].msg_hdr;
        if self.count[t] < 2 {
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            return;
        }
        hdr.msg_control = ctrl.wrapping_add(t * CTRL).cast();
        hdr.msg_controllen = CTRL as _;
        // SAFETY: `ctrl` is the control buffer's base pointer, which holds
        // CTRL = CMSG_SPACE(2) bytes per message, room for one cmsghdr and
        // its u16, and `t` is a message of the batch.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(hdr);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), self.seg[t] as u16);
        }
    }

    /// Turns the unsent trains back into one message per packet.
    fn split_trains(&mut self) {
        let mut spans = Vec::with_capacity(self.packets);
        for t in self.sent..self.built {
            for k in 0..self.count[t] {
                spans.push((self.off[t] + k * self.seg[t], self.seg[t]));
            }
        }
        self.built = self.sent;
        for (off, len) in spans {
            let t = self.built;
            self.off[t] = off;
            self.iovs[t].iov_len = len;
            self.seg[t] = len;
            self.count[t] = 1;
            self.built += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        (a, b)
    }

    fn write(tx: &mut TxBatch, len: usize, fill: u8) {
        let slot = tx.slot().expect("a free slot");
        slot[..len].fill(fill);
        tx.commit(len);
    }

    /// Equal lengths join one train, a different length starts the next,
    /// and whatever the trains, the peer receives the datagrams as
    /// written, in order.
    #[test]
    fn packets_of_one_length_travel_as_a_train_and_arrive_one_by_one() {
        let (a, b) = pair();
        let mut tx = TxBatch::new(2048, 8, true, 64);
        let lens = [1400, 1400, 1400, 60, 60, 1400, 1400, 1200];
        for (i, &len) in lens.iter().enumerate() {
            write(&mut tx, len, i as u8);
        }
        assert!(tx.slot().is_none(), "the batch is full");
        assert_eq!(tx.built, 4, "trains 3 x 1400, 2 x 60, 2 x 1400, 1 x 1200");
        assert_eq!(&tx.count[..4], &[3, 2, 2, 1]);
        assert_eq!(tx.flush(&a).unwrap(), 4);
        assert!(!tx.pending());
        assert_eq!(tx.filled(), 0);
        let mut buf = [0u8; 4096];
        for (i, &len) in lens.iter().enumerate() {
            let n = b.recv(&mut buf).unwrap();
            assert_eq!(n, len, "datagram {i}");
            assert!(buf[..n].iter().all(|&x| x == i as u8), "datagram {i}");
        }
    }

    /// Without GSO every packet is its own message; a train never grows
    /// past the kernel's segment limit or a UDP payload's size.
    #[test]
    fn trains_stop_at_the_kernel_limits_and_not_at_all_without_gso() {
        let mut plain = TxBatch::new(1500, 4, false, 64);
        for _ in 0..4 {
            write(&mut plain, 1400, 1);
        }
        assert_eq!(plain.built, 4);

        let mut small = TxBatch::new(100, 130, true, 64);
        for _ in 0..130 {
            write(&mut small, 64, 2);
        }
        assert_eq!(&small.count[..small.built], &[64, 64, 2]);

        let mut big = TxBatch::new(1500, 100, true, 64);
        for _ in 0..100 {
            write(&mut big, 1444, 3);
        }
        let per_train = MAX_TRAIN_BYTES / 1444;
        assert_eq!(big.count[0], per_train);
        assert!(big.iovs[0].iov_len <= MAX_TRAIN_BYTES);
    }

    /// Trains the kernel refuses (a kernel or route without UDP GSO) are
    /// sent again as one message per packet, at the same places.
    #[test]
    fn a_refused_train_is_split_into_packets() {
        let mut tx = TxBatch::new(1500, 4, true, 64);
        for _ in 0..3 {
            write(&mut tx, 1000, 4);
        }
        write(&mut tx, 500, 5);
        assert_eq!(tx.built, 2);
        tx.split_trains();
        assert_eq!(tx.built, 4);
        assert_eq!(&tx.count[..4], &[1, 1, 1, 1]);
        assert_eq!(tx.off[1] - tx.off[0], 1000);
        assert_eq!(tx.iovs[3].iov_len, 500);
    }
}
