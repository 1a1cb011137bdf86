//! Name similarity for the weakest rung of the ladder: Jaro-Winkler on
//! normalised names, and the trigrams that find candidates without
//! comparing every pair.

/// Jaro-Winkler similarity in [0, 1] (prefix scale 0.1, prefix up to 4).
pub fn jaro_winkler(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let window = (a.len().max(b.len()) / 2).saturating_sub(1);
    let mut a_hit = vec![false; a.len()];
    let mut b_hit = vec![false; b.len()];
    let mut matches = 0usize;
    for (i, ca) in a.iter().enumerate() {
        let lo = i.saturating_sub(window);
        let hi = (i + window + 1).min(b.len());
        for j in lo..hi {
            if !b_hit[j] && b[j] == *ca {
                a_hit[i] = true;
                b_hit[j] = true;
                matches += 1;
                break;
            }
        }
    }
    if matches == 0 {
        return 0.0;
    }
    let mut transpositions = 0usize;
    let mut k = 0usize;
    for (i, ca) in a.iter().enumerate() {
        if a_hit[i] {
            while !b_hit[k] {
                k += 1;
            }
            if *ca != b[k] {
                transpositions += 1;
            }
            k += 1;
        }
    }
    let m = matches as f64;
    let jaro =
        (m / a.len() as f64 + m / b.len() as f64 + (m - transpositions as f64 / 2.0) / m) / 3.0;
    let prefix = a.iter().zip(&b).take(4).take_while(|(x, y)| x == y).count() as f64;
    jaro + prefix * 0.1 * (1.0 - jaro)
}

/// The distinct trigrams of a normalised name, padded so short names have
/// some (`"ab"` → `"  a"`, `" ab"`, `"ab "`).
pub fn trigrams(name: &str) -> Vec<[char; 3]> {
    let padded: Vec<char> = "  "
        .chars()
        .chain(name.chars())
        .chain(" ".chars())
        .collect();
    let mut out: Vec<[char; 3]> = padded.windows(3).map(|w| [w[0], w[1], w[2]]).collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaro_winkler_matches_known_values() {
        assert!((jaro_winkler("martha", "marhta") - 0.9611).abs() < 0.001);
        assert!((jaro_winkler("dwayne", "duane") - 0.84).abs() < 0.001);
        assert_eq!(jaro_winkler("same", "same"), 1.0);
        assert_eq!(jaro_winkler("abc", "xyz"), 0.0);
    }

    #[test]
    fn trigrams_are_distinct_and_padded() {
        let t = trigrams("aaaa");
        assert_eq!(t.len(), 4); // "  a", " aa", "aaa", "aa "
        assert!(trigrams("ab").contains(&[' ', 'a', 'b']));
    }
}
