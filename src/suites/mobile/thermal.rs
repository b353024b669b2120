//! The simulated thermal model: one lumped RC node (a device's heat
//! capacity `C` behind a thermal resistance `R` to ambient) heated by the
//! power of its duty cycle, and a governor that drops the duty cycle at the
//! throttle temperature and restores it at the release temperature. It is
//! a model, not this machine's temperature: every case and output using it
//! says "simulated".

use super::profile::Thermal;

/// The model's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rc {
    /// Modelled temperature, Celsius.
    pub temp_c: f64,
    /// Duty cycle the governor allows now, 0 to 1.
    pub duty: f64,
}

impl Rc {
    /// At ambient, full duty.
    pub fn new(t: &Thermal) -> Rc {
        Rc { temp_c: t.ambient_c, duty: 1.0 }
    }

    /// Power drawn at `duty`: idle power plus the busy share of the rest.
    pub fn power(t: &Thermal, duty: f64) -> f64 {
        t.power_idle_w + (t.power_max_w - t.power_idle_w) * duty
    }

    /// Advances `dt` seconds at the current duty, exactly (the step
    /// response of `C dT/dt = P - (T - T_amb) / R`: T relaxes toward
    /// `T_amb + P R` with time constant `R C`), then lets the governor act.
    pub fn step(&mut self, t: &Thermal, dt: f64) {
        let target = t.ambient_c + Self::power(t, self.duty) * t.r_th_k_per_w;
        let decay = (-dt / (t.r_th_k_per_w * t.c_th_j_per_k)).exp();
        self.temp_c = target + (self.temp_c - target) * decay;
        if self.temp_c >= t.throttle_c {
            self.duty = t.throttled_duty;
        } else if self.temp_c <= t.release_c {
            self.duty = 1.0;
        }
    }
}

/// One simulated window: the duty the governor allowed, the temperature at
/// its end, and the throughput delivered (the real rate measured in the
/// window times the duty).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Duty cycle during the window.
    pub duty: f64,
    /// Modelled temperature at the window's end, Celsius.
    pub temp_c: f64,
    /// Work per second delivered.
    pub throughput: f64,
}

/// Runs the model over `windows` windows of `dt` seconds; `measure` runs the
/// real workload for one window and returns its work per second at full
/// duty.
pub fn simulate(
    t: &Thermal,
    windows: usize,
    dt: f64,
    mut measure: impl FnMut() -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<Window>> {
    let mut rc = Rc::new(t);
    let mut out = Vec::with_capacity(windows);
    for _ in 0..windows {
        let duty = rc.duty;
        let rate = measure()?;
        rc.step(t, dt);
        out.push(Window { duty, temp_c: rc.temp_c, throughput: rate * duty });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Thermal {
        Thermal {
            power_max_w: 5.0,
            power_idle_w: 1.0,
            r_th_k_per_w: 8.0,
            c_th_j_per_k: 50.0,
            ambient_c: 25.0,
            throttle_c: 55.0,
            release_c: 50.0,
            throttled_duty: 0.5,
        }
    }

    #[test]
    fn the_step_response_matches_the_closed_form() {
        // Never throttled: T(t) = T_amb + P R (1 - e^(-t / RC)).
        let mut t = model();
        t.throttle_c = 1e9;
        t.release_c = -1e9;
        let tau = t.r_th_k_per_w * t.c_th_j_per_k;
        let mut rc = Rc::new(&t);
        for _ in 0..400 {
            rc.step(&t, tau / 100.0);
        }
        let want = 25.0 + 5.0 * 8.0 * (1.0 - (-4.0f64).exp());
        assert!((rc.temp_c - want).abs() < 1e-9, "{} vs {want}", rc.temp_c);
    }

    #[test]
    fn the_governor_throttles_releases_and_bounds_the_temperature() {
        let t = model();
        // Steady state at full duty would be 25 + 40 = 65 C, above the
        // 55 C limit: the governor must cut in and keep it near the band.
        let w = simulate(&t, 600, 5.0, || Ok(100.0)).unwrap();
        let first = w.iter().position(|w| w.duty < 1.0).expect("throttled at some point");
        assert!(w[..first].iter().all(|w| w.throughput == 100.0));
        assert!(w.iter().any(|w| w.duty == 0.5 && w.throughput == 50.0));
        let later = &w[first..];
        assert!(later.iter().any(|w| w.duty == 1.0), "released again");
        // A window's rise is at most (65 - 55) * (1 - e^(-5/400)) above the limit.
        assert!(w.iter().all(|w| w.temp_c < 55.0 + 10.0 * (1.0 - (-5.0f64 / 400.0).exp()) + 1e-9));
        assert!(later.iter().all(|w| w.temp_c > 49.0), "it stays near the band once there");
    }
}
