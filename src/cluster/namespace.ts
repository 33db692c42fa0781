/** Delete every key of a cluster namespace (the bench's per-arm state), best effort. */
import { RedisClient } from "bun";

export async function dropNamespace(url: string, namespace: string): Promise<number> {
  const client = new RedisClient(url, { autoReconnect: false, enableOfflineQueue: false, connectionTimeout: 2_000 });
  let dropped = 0;
  try {
    await client.connect();
    let cursor = "0";
    do {
      const [next, keys] = (await client.send("SCAN", [cursor, "MATCH", `${namespace}:*`, "COUNT", "1000"])) as [string, string[]];
      cursor = next;
      if (keys.length > 0) dropped += (await client.send("UNLINK", keys)) as number;
    } while (cursor !== "0");
  } catch {
    // Redis away: the keys stay; they are only a finished arm's.
  } finally {
    client.close();
  }
  return dropped;
}
