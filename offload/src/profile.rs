//! Device profiles: the bandwidths, latencies and rates the plan compiler and the simulator use.
//! Two are checked in (`offload/profiles/h100.json`, `offload/profiles/pcie4.json`, numbers from
//! offload.md §2); others load from JSON.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// One machine: GPU, host link, host memory and disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// Short id (`h100`, `pcie4`), recorded in every plan.
    pub id: String,
    /// Where the numbers come from.
    #[serde(default)]
    pub description: String,
    /// `P`: host-to-device bandwidth from pinned memory, GB/s (10^9 bytes per second).
    pub h2d_pinned_gbps: f64,
    /// Host-to-device bandwidth from pageable memory (synchronous, staged by the driver), GB/s.
    pub h2d_pageable_gbps: f64,
    /// `α`: fixed cost per host-to-device copy, microseconds.
    pub h2d_latency_us: f64,
    /// `D`: disk read bandwidth, GB/s.
    pub disk_gbps: f64,
    /// Fixed cost per disk read, microseconds.
    pub disk_latency_us: f64,
    /// Host memcpy bandwidth of one thread (page cache → pinned staging), GB/s.
    pub memcpy_gbps: f64,
    /// Memcpy threads staging page-cache weights into pinned buffers; `M` = `memcpy_gbps` ×
    /// this (offload.md §2.2: one thread's ≈ 10 GB/s is below a Gen5 link).
    #[serde(default = "default_memcpy_threads")]
    pub memcpy_threads: u32,
    /// Where the host copies of streamed weights live (within `host_ram_bytes`).
    #[serde(default)]
    pub host_weights: HostWeights,
    /// `F`: effective compute rate, TFLOP/s.
    pub compute_tflops: f64,
    /// Device memory bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// Launch overhead per op, microseconds.
    pub launch_us: f64,
    /// Device memory, bytes.
    pub vram_bytes: u64,
    /// Host RAM usable for pinned weight copies, bytes; streamed bytes beyond it come from disk.
    pub host_ram_bytes: u64,
}

/// Where streamed weights that fit in host RAM are kept (offload.md §5, weight tiers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostWeights {
    /// A pinned host copy, made once at load: copies run at `P` straight from it.
    #[default]
    Pinned,
    /// The model file mapped and warm in the page cache: memcpy threads stage each chunk into a
    /// pinned buffer (at `M`) before its copy.
    PageCache,
}

impl HostWeights {
    /// `pinned` or `page-cache`.
    pub fn parse(s: &str) -> Option<HostWeights> {
        match s {
            "pinned" => Some(HostWeights::Pinned),
            "page-cache" => Some(HostWeights::PageCache),
            _ => None,
        }
    }
}

fn default_memcpy_threads() -> u32 {
    4
}

/// The checked-in H100 profile (`offload/profiles/h100.json`).
pub const H100_JSON: &str = include_str!("../profiles/h100.json");
/// The checked-in PCIe-4 consumer profile (`offload/profiles/pcie4.json`).
pub const PCIE4_JSON: &str = include_str!("../profiles/pcie4.json");

impl DeviceProfile {
    /// Parses and validates a JSON profile.
    pub fn from_json(text: &str) -> Result<DeviceProfile, Error> {
        let p: DeviceProfile = serde_json::from_str(text).map_err(|e| Error::InvalidProfile(e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    /// A built-in profile (`h100`, `pcie4`), or a JSON file at `name_or_path`.
    pub fn load(name_or_path: &str) -> Result<DeviceProfile, Error> {
        match name_or_path {
            "h100" => DeviceProfile::from_json(H100_JSON),
            "pcie4" => DeviceProfile::from_json(PCIE4_JSON),
            path => {
                let text = std::fs::read_to_string(Path::new(path)).map_err(|e| Error::Io(format!("{path}: {e}")))?;
                DeviceProfile::from_json(&text)
            }
        }
    }

    /// The checked-in H100 profile.
    pub fn h100() -> DeviceProfile {
        DeviceProfile::from_json(H100_JSON).unwrap_or_else(|_| DeviceProfile::fallback("h100"))
    }

    /// The checked-in PCIe-4 consumer profile.
    pub fn pcie4() -> DeviceProfile {
        DeviceProfile::from_json(PCIE4_JSON).unwrap_or_else(|_| DeviceProfile::fallback("pcie4"))
    }

    fn fallback(id: &str) -> DeviceProfile {
        DeviceProfile {
            id: id.into(),
            description: String::new(),
            h2d_pinned_gbps: 25.0,
            h2d_pageable_gbps: 12.0,
            h2d_latency_us: 10.0,
            disk_gbps: 7.45,
            disk_latency_us: 100.0,
            memcpy_gbps: 10.0,
            memcpy_threads: default_memcpy_threads(),
            host_weights: HostWeights::Pinned,
            compute_tflops: 35.0,
            hbm_gbps: 504.0,
            launch_us: 5.0,
            vram_bytes: 12 << 30,
            host_ram_bytes: 64 << 30,
        }
    }

    /// Every rate positive and finite, every latency finite and non-negative.
    pub fn validate(&self) -> Result<(), Error> {
        let rates = [
            ("h2d_pinned_gbps", self.h2d_pinned_gbps),
            ("h2d_pageable_gbps", self.h2d_pageable_gbps),
            ("disk_gbps", self.disk_gbps),
            ("memcpy_gbps", self.memcpy_gbps),
            ("compute_tflops", self.compute_tflops),
            ("hbm_gbps", self.hbm_gbps),
        ];
        for (n, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::InvalidProfile(format!("{n} must be a positive number, got {v}")));
            }
        }
        if !(1..=256).contains(&self.memcpy_threads) {
            return Err(Error::InvalidProfile(format!(
                "memcpy_threads must be between 1 and 256, got {}",
                self.memcpy_threads
            )));
        }
        for (n, v) in [
            ("h2d_latency_us", self.h2d_latency_us),
            ("disk_latency_us", self.disk_latency_us),
            ("launch_us", self.launch_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::InvalidProfile(format!("{n} must be >= 0, got {v}")));
            }
        }
        Ok(())
    }

    /// Seconds for one pinned (or pageable) host-to-device copy of `bytes`.
    pub fn copy_seconds(&self, bytes: u64, pageable: bool) -> f64 {
        let bw = if pageable {
            self.h2d_pageable_gbps
        } else {
            self.h2d_pinned_gbps
        };
        self.h2d_latency_us * 1e-6 + bytes as f64 / (bw * 1e9)
    }

    /// `M`: aggregate page cache → pinned staging bandwidth of all memcpy threads, GB/s.
    pub fn memcpy_total_gbps(&self) -> f64 {
        self.memcpy_gbps * f64::from(self.memcpy_threads)
    }

    /// Seconds to stage one chunk of `bytes` from the page cache into pinned memory, split
    /// evenly over the memcpy threads.
    pub fn memcpy_seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.memcpy_total_gbps() * 1e9)
    }

    /// Seconds for one disk read of `bytes`.
    pub fn disk_seconds(&self, bytes: u64) -> f64 {
        self.disk_latency_us * 1e-6 + bytes as f64 / (self.disk_gbps * 1e9)
    }
}
