//! The configfs side of a gadget: creating the gadget directory, binding
//! the UDC, mounting FunctionFS, and removing all of it again (on drop, and
//! for `--cleanup` after a killed run).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};

pub const CONFIGFS: &str = "/sys/kernel/config/usb_gadget";

pub fn write_attr(path: &Path, value: &str) -> anyhow::Result<()> {
    fs::write(path, value).with_context(|| format!("cannot write `{value}` to {}", path.display()))
}

pub fn mkdir(path: &Path) -> anyhow::Result<()> {
    fs::create_dir(path).with_context(|| format!("cannot create {}", path.display()))
}

/// The configfs gadget and the FunctionFS mount: created step by step,
/// removed in reverse order on drop.
pub struct Gadget {
    pub dir: PathBuf,
    pub function: String,
    pub mount: Option<PathBuf>,
    pub bound: bool,
}

impl Gadget {
    pub fn func_dir(&self) -> PathBuf {
        self.dir.join("functions").join(&self.function)
    }
    pub fn link(&self) -> PathBuf {
        self.dir.join("configs/c.1").join(&self.function)
    }
    pub fn unbind(&mut self) {
        if self.bound {
            let _ = fs::write(self.dir.join("UDC"), "\n");
            self.bound = false;
        }
    }
    /// Everything but the UDC binding and the mount, in reverse order of creation.
    fn remove_dirs(&self) {
        let _ = fs::remove_file(self.link());
        let _ = fs::remove_dir(self.dir.join("configs/c.1/strings/0x409"));
        let _ = fs::remove_dir(self.dir.join("configs/c.1"));
        let _ = fs::remove_dir(self.func_dir());
        let _ = fs::remove_dir(self.dir.join("strings/0x409"));
        let _ = fs::remove_dir(&self.dir);
    }
    fn unmount(&mut self) {
        if let Some(m) = self.mount.take() {
            // Lazy detach, so a late fd cannot keep it busy.
            let _ = unmount(&m, UnmountFlags::DETACH);
            let _ = fs::remove_dir(&m);
        }
    }
}

impl Drop for Gadget {
    fn drop(&mut self) {
        self.unbind();
        self.unmount();
        self.remove_dirs();
    }
}

pub fn mount_point(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/xferlab-ffs-{name}"))
}

/// Removes a gadget a killed run left behind.
pub fn cleanup(name: &str) -> ExitCode {
    let dir = Path::new(CONFIGFS).join(name);
    let mut found = false;
    if dir.exists() {
        found = true;
        let functions: Vec<String> = fs::read_dir(dir.join("functions"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut g = Gadget {
            dir: dir.clone(),
            function: String::new(),
            mount: None,
            bound: true,
        };
        g.unbind();
        let mp = mount_point(name);
        if mp.exists() {
            g.mount = Some(mp);
            g.unmount();
        }
        for f in functions {
            g.function = f;
            g.remove_dirs();
        }
    } else if mount_point(name).exists() {
        found = true;
        let mut g = Gadget {
            dir,
            function: String::new(),
            mount: Some(mount_point(name)),
            bound: false,
        };
        g.unmount();
    }
    if found {
        outln!("removed gadget `{name}`");
    } else {
        outln!("no gadget `{name}` to remove");
    }
    ExitCode::SUCCESS
}

pub fn pick_udc(want: Option<&str>) -> anyhow::Result<String> {
    let udcs: Vec<String> = fs::read_dir("/sys/class/udc")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let none = "no USB device controller in /sys/class/udc: this machine cannot act as a USB device. \
                On a BeagleBone or Raspberry Pi put the OTG port in peripheral mode (dr_mode = \"peripheral\", \
                dtoverlay=dwc2) and load its UDC driver; for a lab without hardware: modprobe dummy_hcd";
    match want {
        Some(w) if udcs.iter().any(|u| u == w) => Ok(w.to_string()),
        Some(w) => Err(anyhow!(
            "no UDC `{w}` (present: {})",
            if udcs.is_empty() {
                "none".into()
            } else {
                udcs.join(", ")
            }
        )),
        None => match udcs.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(anyhow!(none)),
            many => Err(anyhow!(
                "several UDCs ({}); pick one with --udc",
                many.join(", ")
            )),
        },
    }
}

pub fn check_configfs() -> anyhow::Result<()> {
    if Path::new(CONFIGFS).is_dir() {
        return Ok(());
    }
    if Path::new("/sys/kernel/config").is_dir() {
        // configfs not mounted yet (minimal systems): mount it, quietly.
        let _ = mount(
            "none",
            "/sys/kernel/config",
            "configfs",
            MountFlags::empty(),
            None,
        );
    }
    if Path::new(CONFIGFS).is_dir() {
        return Ok(());
    }
    bail!(
        "{CONFIGFS} does not exist: load the gadget framework (`modprobe libcomposite`) and mount configfs \
         (`mount -t configfs none /sys/kernel/config`), as root"
    )
}
