/// <reference types="node" />
/** Where an agent keeps its input-required rounds in flight, so a new process can finish them. */

import { readFile, rename, writeFile } from "node:fs/promises";

import type { PendingRound } from "./input-required.js";

/**
 * Optional local record of rounds in flight. ReviewHub's open requests already describe every round that still
 * has an unanswered question; a store also covers rounds fully answered while the agent was down.
 */
export interface RoundStore {
  save(pending: PendingRound): Promise<void>;
  discard(roundId: string): Promise<void>;
  load(): Promise<PendingRound[]>;
}

/** The Python client's `PendingRound` field names: one rounds file serves agents in either language. */
interface StoredRound {
  round_id: string;
  params: PendingRound["params"];
  request_state: string | null;
  round: number;
  input_requests: PendingRound["inputRequests"];
  reviewhub_ids: Record<string, string>;
  server: string | null;
  method: string;
}

function toStored(pending: PendingRound): StoredRound {
  return {
    round_id: pending.roundId,
    params: pending.params,
    request_state: pending.requestState,
    round: pending.round,
    input_requests: pending.inputRequests,
    reviewhub_ids: pending.reviewhubIds,
    server: pending.server,
    method: pending.method,
  };
}

function fromStored(stored: StoredRound): PendingRound {
  return {
    roundId: stored.round_id,
    params: stored.params,
    requestState: stored.request_state,
    round: stored.round,
    inputRequests: stored.input_requests,
    reviewhubIds: { ...stored.reviewhub_ids },
    server: stored.server,
    method: stored.method,
  };
}

/** A `RoundStore` in one JSON file, rewritten atomically (write a temporary file, then rename). */
export class JsonFileRoundStore implements RoundStore {
  // One write at a time: two rounds saved concurrently must not lose each other's entry.
  private queue: Promise<unknown> = Promise.resolve();

  constructor(readonly path: string) {}

  async save(pending: PendingRound): Promise<void> {
    await this.update((data) => {
      data[pending.roundId] = toStored(pending);
    });
  }

  async discard(roundId: string): Promise<void> {
    await this.update((data) => {
      delete data[roundId];
    });
  }

  async load(): Promise<PendingRound[]> {
    return Object.values(await this.read()).map(fromStored);
  }

  private async read(): Promise<Record<string, StoredRound>> {
    try {
      return JSON.parse(await readFile(this.path, "utf8")) as Record<string, StoredRound>;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
      throw error;
    }
  }

  private update(change: (data: Record<string, StoredRound>) => void): Promise<void> {
    const next = this.queue.then(async () => {
      const data = await this.read();
      change(data);
      const temporary = `${this.path}.tmp`;
      await writeFile(temporary, JSON.stringify(data));
      await rename(temporary, this.path);
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}
