/**
 * A URL, or a text that names URLs, as it may be shown: a replica's or router's URL may
 * carry credentials (`http://user:pass@host`), which are sent upstream as configured but
 * never shown — not in /status, the dashboard, a CLI's output, a log line or an error.
 * Whatever stood between `scheme://` and `@` becomes `***`, so a reader still sees that
 * credentials are set. Unparseable text is handled alike: it is matched, not parsed.
 */
export function shownUrl(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^@/?#\s"'<>]*@/gi, "$1***@");
}
