/**
 * The relay of an answer to the client: unbuffered, tapping usage on the side, taking the
 * usage chunk out that the router asked for on the client's behalf (the usage rewrite,
 * design decision 2), with the stream's idle deadline (routing.stream_idle_timeout) while the
 * client reads. An upstream failure after the first byte is never retried (decision 4): the
 * stream ends with the API's error event. The relay says once how it ended (`onEnd`).
 */
import type { Failure } from "../fleet/failure.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Log } from "../log.ts";
import type { Endpoint } from "../route/shape.ts";
import { durationText, timeout, type Answer } from "./attempt.ts";
import { streamErrorEvent } from "./errors.ts";
import type { Outcome } from "./outcome.ts";
import { ResponseTap, type TapResult } from "./tap.ts";
import { UsageStripper } from "./usage.ts";
import { failureOfFetchError } from "../fleet/failure.ts";

export interface RelayDeps {
  fleet: Fleet;
  log: Log;
  endpoint: Endpoint;
  idleTimeoutMs: number;
  /** How the relay ended (once): "ok" when it ran its course, with what the tap read and why it did not end well. */
  onEnd: (ended: Outcome, usage: TapResult, error?: string) => void;
}

export class Relay {
  private readonly tap: ResponseTap;
  /** Takes out the usage chunk the router asked for (the client did not). */
  private readonly stripper: UsageStripper | undefined;
  private ended = false;

  constructor(
    private readonly answer: Answer,
    private readonly deps: RelayDeps,
  ) {
    this.tap = new ResponseTap(answer.contentType);
    this.stripper = answer.usageAdded && answer.isSse ? new UsageStripper() : undefined;
  }

  /** The client's response; true in `streaming` when it is a stream that stays in flight until it ends. */
  response(headers: Headers): { response: Response; streaming: boolean } {
    const { res, whole, reader, first } = this.answer;
    if (whole !== undefined || !reader || first?.done) {
      if (whole && whole.byteLength > 0) this.tap.push(whole);
      this.end("ok");
      return { response: new Response(whole && whole.byteLength > 0 ? whole : null, { status: res.status, headers }), streaming: false };
    }
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.pass(controller, first!.value!);
      },
      pull: async (controller) => {
        // A pull that enqueues nothing is not called again, and the client would wait forever
        // (the stripper takes a usage chunk that arrives on its own whole): read on until
        // something is for the client, or the end.
        for (;;) {
          if (await this.next(controller, reader)) return;
        }
      },
      cancel: () => {
        // The client went away (or the drain timeout closed its connection): stop the engine's work so it frees the KV.
        const outcome = this.answer.control.stop?.kind === "drain" ? "drain_timeout" : "client_cancelled";
        this.answer.control.abort({ kind: "client" });
        reader.cancel().catch(() => {});
        this.end(outcome);
      },
    });
    return { response: new Response(body, { status: res.status, headers }), streaming: true };
  }

  /** Pass a chunk on; false when nothing of it is for the client (the usage stripper took it all). */
  private pass(controller: ReadableStreamDefaultController<Uint8Array>, chunk: Uint8Array): boolean {
    this.tap.push(chunk);
    const out = this.stripper ? this.stripper.push(chunk) : chunk;
    if (out.byteLength === 0) return false;
    controller.enqueue(out);
    return true;
  }

  /** Read the next upstream chunk and pass it on; true once the client got something or the stream ended. */
  private async next(controller: ReadableStreamDefaultController<Uint8Array>, reader: NonNullable<Answer["reader"]>): Promise<boolean> {
    const control = this.answer.control;
    const ms = this.deps.idleTimeoutMs;
    // Only while the client reads: a client that does not read holds the upstream back, not this timer.
    const idle = setTimeout(() => control.abort(timeout("stream_idle", `no data for ${durationText(ms)} (routing.stream_idle_timeout)`)), ms);
    try {
      const { done, value } = await reader.read();
      if (done) {
        const rest = this.stripper?.end();
        if (rest && rest.byteLength > 0) controller.enqueue(rest);
        this.end("ok");
        controller.close();
        return true;
      }
      return this.pass(controller, value);
    } catch (error) {
      if (control.stop?.kind === "client" || this.ended) return true;
      this.failMidStream(controller, error);
      return true;
    } finally {
      clearTimeout(idle);
    }
  }

  /** Bytes already reached the client: never retry. End the stream with the API's error event. */
  private failMidStream(controller: ReadableStreamDefaultController<Uint8Array>, error: unknown): void {
    const control = this.answer.control;
    let outcome: Outcome = "upstream_error";
    let status = 502;
    let message: string;
    if (control.stop?.kind === "drain") {
      outcome = "drain_timeout";
      status = 503;
      message = "the router is shutting down: server.drain_timeout passed before this response finished";
    } else {
      const failure: Failure = control.stop?.kind === "failure" ? control.stop.failure : failureOfFetchError(error, " after the response started");
      const replica = this.answer.dispatch.replica;
      if (failure.timer) replica.stats.timeouts[failure.timer]++;
      if (failure.kind === "timeout") {
        outcome = "timeout";
        status = 504;
      }
      this.deps.fleet.health.failed(replica, failure);
      message = `replica ${replica.name} failed mid-stream: ${failure.reason}`;
      this.deps.log.warn("upstream failed mid-response", { replica: replica.name, reason: failure.reason });
    }
    control.controller.abort();
    this.end(outcome, message);
    if (this.answer.isSse) {
      controller.enqueue(new TextEncoder().encode(streamErrorEvent(this.deps.endpoint, message, status)));
      controller.close();
    } else controller.error(error);
  }

  private end(ended: Outcome, error?: string): void {
    if (this.ended) return;
    this.ended = true;
    this.deps.onEnd(ended, this.tap.finish(), error);
  }
}
