/**
 * A replica's characters of canonical prompt per engine token, learnt from the usage its
 * engine reports: how the router turns a prompt's characters into the engine's tokens.
 */

/** Default characters per token until enough usage is observed. */
export const DEFAULT_CHARS_PER_TOKEN = 4;

/** Each observation keeps this share of the previous sums: recent traffic counts most. */
const TOKENS_DECAY = 0.95;

/**
 * Prompt tokens a replica must have reported (in all) before its own ratio replaces the
 * default: a chat template's tokens skew a short prompt's ratio (what that did:
 * docs/operations.md#the-capacity-wall). Less than one real agent turn, so a replica serving real
 * work calibrates on its first large request, while a few short chats leave the default alone.
 */
export const CALIBRATION_MIN_TOKENS = 1000;

/**
 * Prompts shorter than this are not learnt from at all: with template overhead a third or
 * more of their tokens, a hundred "hi"s would otherwise pass the threshold above and set
 * the same skewed ratio.
 */
export const CALIBRATION_MIN_SAMPLE_TOKENS = 64;

export class Calibration {
  /** Characters of canonical prompt per engine token, learned from usage.prompt_tokens. */
  charsPerToken = DEFAULT_CHARS_PER_TOKEN;
  private observedChars = 0;
  private observedTokens = 0;
  /** Prompt tokens learnt from in all (not decayed): the ratio is used from CALIBRATION_MIN_TOKENS on. */
  private learntTokens = 0;

  /**
   * Learn the engine's tokenisation from a response: the ratio of decayed sums, so large
   * prompts (the ones that fill the KV) dominate and a burst of short ones, whose chat
   * template overhead skews their own ratio, barely moves it. Short prompts are skipped and
   * the default kept until enough tokens were seen (see CALIBRATION_MIN_TOKENS). `chars`
   * must be the whole prompt the engine counted (the proxy skips previous_response_id
   * follow-ups, whose stored conversation it never sees).
   */
  observe(chars: number, promptTokens: number): void {
    if (!(promptTokens >= CALIBRATION_MIN_SAMPLE_TOKENS) || !(chars > 0)) return;
    this.observedChars = this.observedChars * TOKENS_DECAY + chars;
    this.observedTokens = this.observedTokens * TOKENS_DECAY + promptTokens;
    this.learntTokens += promptTokens;
    if (this.learntTokens < CALIBRATION_MIN_TOKENS) return;
    this.charsPerToken = Math.min(16, Math.max(0.5, this.observedChars / this.observedTokens));
  }
}
