// Rank 0's inbox (serve/inbox.h): a cancel or suspend for the running job sets its flag; one that arrives while the
// job still waits in the inbox applies when it starts, and only to that start (a job suspended before its first step
// and resumed must not be suspended again by the same word: that looped for ever once).
#include <gtest/gtest.h>

#include "serve/inbox.h"

using h3::serve::Inbox;

TEST(ServeInbox, FlagsForTheRunningJob) {
  Inbox in;
  EXPECT_EQ(in.next(0)["type"], "tick");
  in.take({{"type", "job"}, {"id", "a"}});
  EXPECT_EQ(in.next(0)["id"], "a");
  EXPECT_FALSE(in.cancel || in.suspend);
  in.take({{"type", "suspend"}, {"id", "a"}});
  EXPECT_TRUE(in.suspend);
  in.take({{"type", "cancel"}, {"id", "other"}});
  EXPECT_FALSE(in.cancel);
  in.finished();
  EXPECT_FALSE(in.suspend);
}

TEST(ServeInbox, AWordForAWaitingJobAppliesToItsNextStartOnly) {
  Inbox in;
  in.take({{"type", "job"}, {"id", "a"}});
  in.take({{"type", "suspend"}, {"id", "a"}});  // before the loop took the job
  EXPECT_EQ(in.next(0)["id"], "a");
  EXPECT_TRUE(in.suspend);
  in.finished();
  in.take({{"type", "job"}, {"id", "b"}});
  EXPECT_EQ(in.next(0)["id"], "b");
  EXPECT_FALSE(in.suspend);
  in.finished();
  in.take({{"type", "job"}, {"id", "a"}});  // resumed
  EXPECT_EQ(in.next(0)["id"], "a");
  EXPECT_FALSE(in.suspend) << "the old suspend was taken again";
  in.finished();
  // The same for a cancel, and a forget or shutdown is a command like a job.
  in.take({{"type", "job"}, {"id", "c"}});
  in.take({{"type", "cancel"}, {"id", "c"}});
  in.take({{"type", "forget"}, {"id", "a"}});
  EXPECT_EQ(in.next(0)["id"], "c");
  EXPECT_TRUE(in.cancel);
  in.finished();
  EXPECT_EQ(in.next(0)["type"], "forget");
}
