//! Choosing the next token from logits.

use crate::{Error, Result};

/// How the next token is chosen. The default is greedy (temperature 0): the highest logit,
/// the lowest id on a tie.
///
/// With a temperature above 0 the logits are divided by it, cut to the `top_k` highest (0: all),
/// turned into probabilities, cut to the smallest set of highest ones whose sum reaches `top_p`,
/// and one is drawn with a generator seeded by `seed` (the same seed gives the same tokens).
///
/// ```
/// use tensorlane_llm::Sampling;
///
/// let greedy = Sampling::default();
/// assert_eq!(greedy.sampler().pick(&[0.5, 2.0, -1.0]).unwrap(), 1);
///
/// let warm = Sampling { temperature: 0.8, top_k: 40, top_p: 0.95, seed: 7, ..Sampling::default() };
/// let mut sampler = warm.sampler();
/// let a = sampler.pick(&[0.5, 2.0, -1.0]).unwrap();
/// assert!(a < 3);
/// assert_eq!(warm.sampler().pick(&[0.5, 2.0, -1.0]).unwrap(), a, "the same seed draws the same");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits; 0 (or below) is greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: no cut).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities reach `top_p` (1: no cut).
    pub top_p: f32,
    /// The random generator's seed.
    pub seed: u64,
    /// Stop generating after an end-of-generation token (EOS; it is still yielded).
    pub stop_at_eog: bool,
    /// Added to the logits of these token ids before anything else (OpenAI's `logit_bias`: -100
    /// bans a token, 100 all but forces it); ids outside the vocabulary are ignored.
    pub logit_bias: Vec<(u32, f32)>,
}

/// A [`Sampling`] with its random generator's state: each [`pick`](Sampler::pick) advances it.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: Sampling,
    state: u64,
    /// The grammar the picks must follow ([`Sampler::constrained`]).
    #[cfg(feature = "grammar")]
    constraint: Option<crate::grammar::Constraint>,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            stop_at_eog: true,
            logit_bias: Vec::new(),
        }
    }
}

impl Sampling {
    /// Checks the parameters: a finite temperature, `top_p` in `(0, 1]`.
    pub fn check(&self) -> Result<()> {
        if !self.temperature.is_finite() {
            return Err(Error::Options(format!(
                "temperature {} is not a number",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Options(format!("top-p {} is outside (0, 1]", self.top_p)));
        }
        Ok(())
    }

    /// A sampler that draws with these parameters, its generator seeded by `seed`.
    pub fn sampler(&self) -> Sampler {
        Sampler {
            params: self.clone(),
            state: self.seed ^ 0x9E37_79B9_7F4A_7C15,
            #[cfg(feature = "grammar")]
            constraint: None,
        }
    }
}

impl Sampler {
    /// The parameters.
    pub fn params(&self) -> &Sampling {
        &self.params
    }

    /// The next random number (splitmix64 over the seed).
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// This sampler, its picks restricted to what `constraint` allows (feature `grammar`): the
    /// logits of every other token are −∞ before temperature, top-k and top-p apply, and once the
    /// grammar is complete the pick is the end-of-sequence token.
    #[cfg(feature = "grammar")]
    pub fn constrained(mut self, constraint: crate::grammar::Constraint) -> Sampler {
        self.constraint = Some(constraint);
        self
    }

    /// Picks a token from `logits` (see [`Sampling`]), within the grammar of a
    /// [constrained](Sampler::constrained) sampler. An error for empty logits, bad parameters, or
    /// a grammar that allows no token.
    pub fn pick(&mut self, logits: &[f32]) -> Result<u32> {
        #[cfg(feature = "grammar")]
        if let Some(mut c) = self.constraint.take() {
            let picked = self.pick_within(&mut c, logits);
            self.constraint = Some(c);
            return picked;
        }
        self.pick_free(logits)
    }

    /// [`pick`](Self::pick) within `c`'s mask, and `c` told of the pick.
    #[cfg(feature = "grammar")]
    fn pick_within(&mut self, c: &mut crate::grammar::Constraint, logits: &[f32]) -> Result<u32> {
        use crate::grammar::Allowed;
        let id = match c.allowed(logits.len())? {
            Allowed::End(eos) => return Ok(eos),
            Allowed::Mask(mask) => {
                let masked: Vec<f32> = logits
                    .iter()
                    .zip(&mask)
                    .map(|(&l, &ok)| if ok { l } else { f32::NEG_INFINITY })
                    .collect();
                self.pick_free(&masked)?
            }
        };
        // Only where every allowed logit was NaN could the pick fall outside the mask; the
        // grammar refuses such a token here.
        c.commit(id)?;
        Ok(id)
    }

    /// [`pick`](Self::pick) without the grammar.
    fn pick_free(&mut self, logits: &[f32]) -> Result<u32> {
        self.params.check()?;
        let Sampling {
            temperature,
            top_k,
            top_p,
            ..
        } = self.params;
        if logits.is_empty() {
            return Err(Error::Options("no logits to sample from".into()));
        }
        let biased: std::borrow::Cow<'_, [f32]> = if self.params.logit_bias.is_empty() {
            logits.into()
        } else {
            let mut v = logits.to_vec();
            for &(id, b) in &self.params.logit_bias {
                if let Some(x) = v.get_mut(id as usize) {
                    *x += b;
                }
            }
            v.into()
        };
        let logits = &*biased;
        let argmax = || {
            let mut best = 0;
            for (i, &l) in logits.iter().enumerate() {
                if l > logits[best] {
                    best = i;
                }
            }
            best as u32
        };
        if temperature <= 0.0 {
            return Ok(argmax());
        }
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i as u32, l / temperature))
            .collect();
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if top_k > 0 {
            cand.truncate(top_k);
        }
        if cand.is_empty() {
            return Ok(argmax());
        }
        let max = cand[0].1;
        let mut p: Vec<f64> = cand.iter().map(|c| f64::from(c.1 - max).exp()).collect();
        let sum: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= sum);
        let mut keep = p.len();
        if top_p < 1.0 {
            let mut acc = 0.0;
            for (i, x) in p.iter().enumerate() {
                acc += x;
                if acc >= f64::from(top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        let total: f64 = p[..keep].iter().sum();
        let r = (self.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut acc = 0.0;
        for (i, x) in p[..keep].iter().enumerate() {
            acc += x;
            if r < acc {
                return Ok(cand[i].0);
            }
        }
        Ok(cand[keep - 1].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `logit_bias` moves the greedy choice (and a warm draw) and ignores ids past the logits.
    #[test]
    fn logit_bias_moves_the_choice() {
        let logits = [0.5, 2.0, -1.0];
        let ban = Sampling {
            logit_bias: vec![(1, -100.0), (7, 100.0)],
            ..Sampling::default()
        };
        assert_eq!(ban.sampler().pick(&logits).unwrap(), 0);
        let force = Sampling {
            logit_bias: vec![(2, 100.0)],
            temperature: 1.0,
            seed: 3,
            ..Sampling::default()
        };
        let mut s = force.sampler();
        assert!((0..20).all(|_| s.pick(&logits).unwrap() == 2));
    }

    #[test]
    fn seeded_draws_repeat_and_follow_the_distribution() {
        let logits = [1.0f32, 2.0, 3.0];
        let draw = |seed| {
            let mut s = Sampling {
                temperature: 1.0,
                seed,
                ..Sampling::default()
            }
            .sampler();
            (0..3000).map(|_| s.pick(&logits).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        let d = draw(9);
        let share = d.iter().filter(|&&t| t == 2).count() as f64 / d.len() as f64;
        // softmax([1,2,3])[2] = 0.665
        assert!((share - 0.665).abs() < 0.04, "{share}");
        let mut k1 = Sampling {
            temperature: 1.0,
            top_k: 1,
            ..Sampling::default()
        }
        .sampler();
        assert!((0..100).all(|_| k1.pick(&logits).unwrap() == 2));
        let mut p = Sampling {
            temperature: 1.0,
            top_p: 0.6,
            ..Sampling::default()
        }
        .sampler();
        assert!((0..100).all(|_| p.pick(&logits).unwrap() == 2));
        assert!(
            Sampling {
                top_p: 0.0,
                ..Sampling::default()
            }
            .sampler()
            .pick(&logits)
            .is_err()
        );
    }
}
