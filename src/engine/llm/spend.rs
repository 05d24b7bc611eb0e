//! What model calls cost: tokens added up, and dollars where the price table knows the model.

use super::Usage;
use crate::config::Prices;

pub(crate) use crate::protocol::usage::Spend;

/// The cost of `usage` on `model` at `provider` (`openai` / `anthropic`), if priced.
pub(crate) fn cost_of(prices: &Prices, provider: &str, model: &str, usage: &Usage) -> Option<f64> {
    prices.find(provider, model).map(|p| p.cost(usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn cost_prices_each_kind_of_token_separately() {
        let prices = Prices::default();
        let usage = Usage {
            prompt_tokens: 1_100_000,
            completion_tokens: 100_000,
            cache_read_tokens: 800_000,
            cache_write_tokens: 200_000,
            cache_write_1h_tokens: 0,
        };
        // 100k uncached × $3 + 800k × $0.30 + 200k × $3.75 + 100k out × $15 per million.
        let cost = cost_of(&prices, "anthropic", "claude-sonnet-4-5-20250929", &usage).unwrap();
        assert!((cost - (0.3 + 0.24 + 0.75 + 1.5)).abs() < 1e-9, "{cost}");
        assert_eq!(cost_of(&prices, "anthropic", "llama3", &usage), None);
        assert_eq!(cost_of(&prices, "openai", "claude-sonnet-4-5", &usage), None);
        // The longest matching name wins.
        assert_eq!(prices.find("openai", "gpt-4.1-mini-2025-04-14").unwrap().input, 0.4);
        assert_eq!(prices.find("openai", "gpt-4.1-2025-04-14").unwrap().input, 2.0);
    }

    #[test]
    fn one_hour_cache_writes_cost_twice_the_input_price_at_anthropic() {
        let prices = Prices::default();
        let usage = Usage {
            prompt_tokens: 1_100_000,
            completion_tokens: 100_000,
            cache_read_tokens: 800_000,
            cache_write_tokens: 200_000,
            cache_write_1h_tokens: 150_000,
        };
        // 100k uncached × $3 + 800k × $0.30 + 50k × $3.75 (5 min) + 150k × $6 (1 h) + 100k out × $15.
        let cost = cost_of(&prices, "anthropic", "claude-sonnet-4-5-20250929", &usage).unwrap();
        assert!((cost - (0.3 + 0.24 + 0.1875 + 0.9 + 1.5)).abs() < 1e-9, "{cost}");
        // Opus 4.6 from its own input price: 150k × $10.
        let opus = cost_of(&prices, "anthropic", "claude-opus-4-6", &usage).unwrap();
        assert!((opus - (0.5 + 0.4 + 0.3125 + 1.5 + 2.5)).abs() < 1e-9, "{opus}");
    }

    #[test]
    fn describe_shows_cache_tokens_and_a_cost_only_when_priced() {
        let mut spend = Spend::default();
        spend.add(&Usage::tokens(1234, 56), None);
        assert_eq!(spend.describe(), "1,234 in / 56 out");
        spend.add(
            &Usage {
                prompt_tokens: 10_000,
                completion_tokens: 100,
                cache_read_tokens: 9_000,
                cache_write_tokens: 500,
                cache_write_1h_tokens: 0,
            },
            Some(0.0123),
        );
        assert_eq!(spend.describe(), "11,234 in (9,000 cache read, 500 cache write) / 156 out · at least $0.0123");
        spend.add(
            &Usage {
                prompt_tokens: 2_000,
                completion_tokens: 4,
                cache_read_tokens: 0,
                cache_write_tokens: 1_500,
                cache_write_1h_tokens: 1_200,
            },
            Some(0.01),
        );
        assert_eq!(
            spend.describe(),
            "13,234 in (9,000 cache read, 2,000 cache write, 1,200 of them 1-hour) / 160 out · at least $0.0223"
        );
        let mut priced = Spend::default();
        priced.add(&Usage::tokens(10, 1), Some(2.5));
        assert_eq!(priced.describe(), "10 in / 1 out · $2.50");
    }
}
