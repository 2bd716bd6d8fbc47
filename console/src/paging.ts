// Paged admin listings (page_size / page_token, README "AdminService"): the
// console follows the tokens where a page needs a whole listing, within a bound.
import type { Api } from "./api";
import type { ConsumerGroupInfo } from "./gen/queen/v1/admin_pb";

/** Cursors asked per ListConsumerGroups page, and pages followed at most. */
export const GROUP_PAGE_SIZE = 1000;
export const GROUP_PAGES_MAX = 20;

/**
 * Every consumer group of a queue (or one group), following the page tokens
 * (at most GROUP_PAGES_MAX pages). A group whose cursors span pages comes back
 * as one entry; its totals are the whole group's on every page already.
 */
export async function allGroups(
  api: Api,
  queue: string,
  consumerGroup: string,
  signal: AbortSignal,
): Promise<ConsumerGroupInfo[]> {
  const out: ConsumerGroupInfo[] = [];
  let pageToken = "";
  for (let i = 0; i < GROUP_PAGES_MAX; i++) {
    const r = await api.admin.listConsumerGroups(
      { queue, consumerGroup, pageSize: GROUP_PAGE_SIZE, pageToken },
      { signal },
    );
    for (const g of r.groups) {
      const last = out[out.length - 1];
      if (last !== undefined && last.consumerGroup === g.consumerGroup && last.queue === g.queue)
        last.partitions.push(...g.partitions);
      else out.push(g);
    }
    pageToken = r.nextPageToken;
    if (!pageToken) break;
  }
  return out;
}
