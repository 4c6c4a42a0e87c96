// A dpmine REST client in TypeScript, typed only by `generated/schema.d.ts`: the output of
// `openapi-typescript` with default options on a live server's /openapi.json (`npm run generate`).
// `npm run check` type-checks it strictly; `npm start` runs a noisy count, a top-K itemsets call
// and a background job, and prints what came back as one JSON object on stdout.
//
// Environment: DPMINE_URL (the server), DPMINE_API_KEY (an analyst's key), DPMINE_DATASET (a
// table dataset with a categorical attribute DPMINE_ATTRIBUTE holding category DPMINE_CATEGORY).

import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "./generated/schema.js";

type Schemas = components["schemas"];

function setting(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`set ${name} (see the header of client.ts)`);
  }
  return value;
}

const dataset_id = setting("DPMINE_DATASET");
const client = createClient<paths>({
  baseUrl: setting("DPMINE_URL"),
  headers: { Authorization: `Bearer ${setting("DPMINE_API_KEY")}` },
});

/** A fresh Idempotency-Key: a retry with the same key would get the stored release. */
function once() {
  return { "Idempotency-Key": randomUUID() };
}

/** The answer's body, or an Error carrying the server's `{error, detail}`. */
function body<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  if (answer.data === undefined) {
    throw new Error(`HTTP ${answer.response.status}: ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

// Minimal requests: only the fields without a default. A field with a default must be optional.
const countRequest: Schemas["NoisyCountRequest"] = {
  epsilon: 0.5,
  predicate: {
    kind: "cat",
    attribute: setting("DPMINE_ATTRIBUTE"),
    category: setting("DPMINE_CATEGORY"),
  },
};
const topKRequest: Schemas["TopKItemsetsRequest"] = { k: 3, min_length: 1, epsilon: 1.0 };

// A job names its operation and carries that operation's own request type.
const jobRequest: paths["/v1/datasets/{dataset_id}/jobs"]["post"]["requestBody"]["content"]["application/json"] =
  { operation: "fim.topk_laplace", request: { k: 2, min_length: 1, epsilon: 1.0 } };
// @ts-expect-error: a count's request is not a top-K request; typed submissions refuse it.
const mistypedJob: Schemas["CountNoisyJob"] = { operation: "count.noisy", request: { k: 2 } };
void mistypedJob;

const FINAL: ReadonlySet<Schemas["JobInfo"]["status"]> = new Set([
  "done",
  "failed",
  "cancelled",
  "interrupted",
]);

async function waitForJob(job_id: string): Promise<Schemas["JobInfo"]> {
  for (;;) {
    const job = body(await client.GET("/v1/jobs/{job_id}", { params: { path: { job_id } } }));
    if (FINAL.has(job.status)) {
      return job;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A finished top-K job's result, checked to have the shape of the operation's answer. */
function topKResult(job: Schemas["JobInfo"]): Schemas["TopKItemsetsResponse"] {
  const result = job.result;
  if (job.status !== "done" || result == null || !Array.isArray(result["itemsets"])) {
    throw new Error(`job ${job.id} ended ${job.status}: ${job.message}`);
  }
  return result as unknown as Schemas["TopKItemsetsResponse"];
}

async function main(): Promise<void> {
  const path = { dataset_id };
  const count = body(
    await client.POST("/v1/datasets/{dataset_id}/counts", {
      params: { path, header: once() },
      body: countRequest,
    }),
  );
  const topK = body(
    await client.POST("/v1/datasets/{dataset_id}/itemsets/top-k-em", {
      params: { path, header: once() },
      body: topKRequest,
    }),
  );
  const submitted = body(
    await client.POST("/v1/datasets/{dataset_id}/jobs", {
      params: { path, header: once() },
      body: jobRequest,
    }),
  );
  const job = await waitForJob(submitted.id);
  const jobTopK = topKResult(job);
  const itemsets = (released: Schemas["TopKItemsetsResponse"]) =>
    released.itemsets.map((itemset) => ({ items: itemset.items, count: itemset.noisy_count }));
  const report = {
    count: { count: count.count, epsilon: count.receipt.epsilon_exact },
    top_k: { itemsets: itemsets(topK), epsilon: topK.receipt.epsilon_exact },
    job: {
      operation: job.operation,
      status: job.status,
      submitted_status: submitted.status,
      itemsets: itemsets(jobTopK),
      epsilon: jobTopK.receipt.epsilon_exact,
    },
  };
  process.stdout.write(JSON.stringify(report) + "\n");
}

await main();
