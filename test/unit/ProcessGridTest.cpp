// Golden test: the worked example of megatron-memory.md part B.5.
#include "moec/Layout/ProcessGrid.h"
#include <gtest/gtest.h>

using namespace moec;
using Groups = std::vector<std::vector<int64_t>>;

namespace {
ProcessGrid workedExample() {
  ProcessGridSizes S;
  S.TP = 2;
  S.CP = 2;
  S.PP = 2;
  S.DP = 2;
  S.EP = 4;
  S.ETP = 1;
  S.EDP = 2;
  return ProcessGrid(S);
}
} // namespace

TEST(ProcessGrid, WorkedExampleDenseGroups) {
  ProcessGrid G = workedExample();
  EXPECT_EQ(G.Dense.worldSize(), 16);
  EXPECT_EQ(G.groups("tp").front(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(G.groups("tp").back(), (std::vector<int64_t>{14, 15}));
  EXPECT_EQ(G.groups("cp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(G.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(G.groups("dp-cp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(G.groups("tp-cp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(G.groups("pp"), (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(G.groups("tp-pp").front(), (std::vector<int64_t>{0, 1, 8, 9}));
  EXPECT_EQ(G.groups("tp-pp")[1], (std::vector<int64_t>{2, 3, 10, 11}));
}

TEST(ProcessGrid, WorkedExampleExpertGroups) {
  ProcessGrid G = workedExample();
  EXPECT_EQ(G.groups("ep"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(G.groups("etp").size(), 16u);
  EXPECT_EQ(G.groups("edp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  // Both grids produce the same pipeline groups.
  EXPECT_EQ(G.Expert.groups("pp"), G.Dense.groups("pp"));
}

TEST(ProcessGrid, Coordinates) {
  ProcessGrid G = workedExample();
  // Dense rank = t + 2c + 4d + 8p.
  EXPECT_EQ(G.Dense.coordinate(13, "tp"), 1);
  EXPECT_EQ(G.Dense.coordinate(13, "cp"), 0);
  EXPECT_EQ(G.Dense.coordinate(13, "dp"), 1);
  EXPECT_EQ(G.Dense.coordinate(13, "pp"), 1);
  // Expert rank = e + 4 d_e + 8p.
  EXPECT_EQ(G.Expert.coordinate(13, "ep"), 1);
  EXPECT_EQ(G.Expert.coordinate(13, "dp"), 1);
  EXPECT_EQ(G.groupOf(13, "dp-cp"), (std::vector<int64_t>{9, 11, 13, 15}));
}

TEST(ProcessGrid, PipelineBeforeDataOrder) {
  ProcessGridSizes S;
  S.TP = 2;
  S.PP = 2;
  S.DP = 2;
  S.EDP = 4;
  S.PipelineLast = false; // rank = t + 2p + 4d
  ProcessGrid G(S);
  EXPECT_EQ(G.groups("pp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(G.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(ProcessGrid, HierarchicalGroupsFollowMegatronsDocstring) {
  // parallel_state.py create_hierarchical_groups: 16 GPUs, sizes [2, 2, 4].
  std::vector<int64_t> G(16);
  for (int64_t I = 0; I < 16; ++I)
    G[size_t(I)] = 100 + I; // members are ranks, not positions
  auto Levels = hierarchicalGroups({G}, {2, 2, 4});
  ASSERT_EQ(Levels.size(), 3u);
  EXPECT_EQ(Levels[0],
            (Groups{{100, 101}, {102, 103}, {104, 105}, {106, 107}, {108, 109}, {110, 111}, {112, 113}, {114, 115}}));
  EXPECT_EQ(Levels[1],
            (Groups{{100, 102}, {101, 103}, {104, 106}, {105, 107}, {108, 110}, {109, 111}, {112, 114}, {113, 115}}));
  EXPECT_EQ(Levels[2],
            (Groups{{100, 104, 108, 112}, {101, 105, 109, 113}, {102, 106, 110, 114}, {103, 107, 111, 115}}));
  // Sizes that do not multiply to the group's size give nothing.
  EXPECT_TRUE(hierarchicalGroups({G}, {2, 4}).empty());
}
