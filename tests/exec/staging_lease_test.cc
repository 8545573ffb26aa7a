// The executor's staging leases (core/src/exec/work_queues.h, review F5): a buffer goes back to
// its pool exactly once, whichever of release(), a move-assignment or the destructor comes first,
// and a job refused by a failed queue gives its lease back.
#include <gtest/gtest.h>

#include <atomic>

#include "work_queues.h"

namespace wmap::exec_detail {
namespace {

TEST(StagingLease, TheErrorPathGivesTheBufferBackOnce) {
  StagingPool pool(2);
  std::atomic<bool> failed{false};
  {
    Job job{Job::Kind::kCopyStaged, 0, 0, pool.acquire(failed)};
    ASSERT_TRUE(job.staging);
    EXPECT_EQ(pool.free_count(), 1u);
    job.staging.release();  // after the copy, as copy_piece_unit does
    EXPECT_EQ(pool.free_count(), 2u);
    job.staging.release();  // what the old catch did a second time
    EXPECT_EQ(pool.free_count(), 2u);
  }  // and the destructor
  EXPECT_EQ(pool.free_count(), 2u);
  StagingLease a = pool.acquire(failed), b = pool.acquire(failed);
  EXPECT_EQ(pool.free_count(), 0u);
  a = std::move(b);  // a's buffer goes back, b's is now a's
  EXPECT_EQ(pool.free_count(), 1u);
  EXPECT_FALSE(b);
}

TEST(StagingLease, AJobRefusedByAFailedQueueGivesItsLeaseBack) {
  StagingPool pool(1);
  std::atomic<bool> failed{false};
  JobQueue queue(4);
  queue.fail();
  EXPECT_FALSE(queue.push({Job::Kind::kCopyStaged, 0, 0, pool.acquire(failed)}));
  EXPECT_EQ(pool.free_count(), 1u);
  failed = true;
  EXPECT_FALSE(pool.acquire(failed));  // a failed load hands out no buffer
}

TEST(StagingLease, QueuedJobsGiveTheirLeasesBackWhenPopped) {
  StagingPool pool(2);
  std::atomic<bool> failed{false};
  JobQueue queue(4);
  ASSERT_TRUE(queue.push({Job::Kind::kCopyStaged, 1, 0, pool.acquire(failed)}));
  ASSERT_TRUE(queue.push({Job::Kind::kCopyStaged, 2, 0, pool.acquire(failed)}));
  EXPECT_EQ(pool.free_count(), 0u);
  queue.close();
  for (;;) {
    Job j;
    if (!queue.pop(j)) break;
    EXPECT_TRUE(j.staging);
  }
  EXPECT_EQ(pool.free_count(), 2u);
}

}  // namespace
}  // namespace wmap::exec_detail
