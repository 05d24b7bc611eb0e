//! Tokens and what they cost, as the engine reports them and the front ends add them up.

use serde::{Deserialize, Serialize};

/// Tokens of one model call (or a sum of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Every input token, cached or not (what fills the context window).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, written with the 1-hour lifetime (Anthropic bills them higher
    /// than 5-minute writes); 0 where the provider has one lifetime.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    pub fn tokens(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage { prompt_tokens, completion_tokens, ..Usage::default() }
    }

    /// Cache writes with the 5-minute (or the provider's only) lifetime.
    pub(crate) fn cache_write_5m_tokens(&self) -> u64 {
        self.cache_write_tokens.saturating_sub(self.cache_write_1h_tokens)
    }

    /// Input tokens billed at the plain input price.
    pub(crate) fn uncached_prompt_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cache_read_tokens + self.cache_write_tokens)
    }

    pub(crate) fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cache_write_1h_tokens += other.cache_write_1h_tokens;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.prompt_tokens + self.completion_tokens == 0
    }
}

/// Tokens and dollars of some model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spend {
    pub(crate) usage: Usage,
    /// Dollars of the priced calls.
    pub(crate) cost_usd: f64,
    pub(crate) priced_calls: u32,
    pub(crate) unpriced_calls: u32,
}

impl Spend {
    pub(crate) fn add(&mut self, usage: &Usage, cost_usd: Option<f64>) {
        self.usage.add(usage);
        match cost_usd {
            Some(cost) => {
                self.cost_usd += cost;
                self.priced_calls += 1;
            }
            None => self.unpriced_calls += 1,
        }
    }

    /// `12,345 in (10,000 cache read, 1,200 cache write) / 678 out · $0.0123`; the cost is
    /// left out when no call was priced, and marked as a lower bound when some were not.
    /// 1-hour writes, when there are any, are named: `1,200 cache write, 800 of them 1-hour`.
    pub(crate) fn describe(&self) -> String {
        let u = &self.usage;
        let mut text = format!("{} in", thousands(u.prompt_tokens));
        if u.cache_read_tokens + u.cache_write_tokens > 0 {
            text.push_str(&format!(
                " ({} cache read, {} cache write",
                thousands(u.cache_read_tokens),
                thousands(u.cache_write_tokens)
            ));
            if u.cache_write_1h_tokens > 0 {
                text.push_str(&format!(", {} of them 1-hour", thousands(u.cache_write_1h_tokens)));
            }
            text.push(')');
        }
        text.push_str(&format!(" / {} out", thousands(u.completion_tokens)));
        if self.priced_calls > 0 {
            let at_least = if self.unpriced_calls > 0 { "at least " } else { "" };
            text.push_str(&format!(" · {at_least}{}", dollars(self.cost_usd)));
        }
        text
    }
}

/// Dollars with enough digits to see small sums: `$0.0123`, `$1.23`.
pub(crate) fn dollars(amount: f64) -> String {
    if amount < 1.0 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
