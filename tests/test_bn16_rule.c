/* Which 16-bit NHWC batch norms the own kernels take (ops/cuda/bn16_rule.h), on both
 * sides of each bound of auto's rule, and GPUPERF_BN16 read into the tuning. Runs
 * without a GPU: the rule is plain C. */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "ops/cuda/bn16_rule.h"
#include "test.h"

TEST(bn16_auto_takes_the_shapes_it_won)
{
	/* MobileNetV2 at batch 256: 32 channels over 112x112 (102.8 Mi elements), 24 over
	 * 56x56, 144 over 56x56; ResNet's 64 over 56x56 */
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 32, 112, 112, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 24, 56, 56, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 144, 56, 56, 1, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 64, 56, 56, 0, 0));
	/* 64 and 128 channels, or any multiple of 64 under 256, take them only before an
	 * unfused ReLU6 */
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 192, 28, 28, 1, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 192, 28, 28, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 128, 56, 56, 0, 0));
	/* from 256 channels they do (ResNet-50's 256 over 56x56, 1024 over 14x14, 2048
	 * over 7x7: 205.5, 51.4 and 25.7 M elements), above the size bound only (512 over
	 * 7x7: 6.4 M) */
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 256, 56, 56, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 1024, 14, 14, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 2048, 7, 7, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 512, 7, 7, 0, 0));
	/* and from 12 Mi elements on 256 channels and more: 256 over 14 x 14 (12.25 Mi),
	 * MobileNetV2's 1280 over 7 x 7 (15.3 Mi); the bound exactly, one image fewer */
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 256, 14, 14, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 1280, 7, 7, 1, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 48, 256, 32, 32, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 47, 256, 32, 32, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 48, 192, 32, 43, 0, 0));
	/* the size bound before a ReLU6: 16 Mi elements exactly, one row or image fewer */
	CHECK(bn16_own_wanted(BN16_AUTO, 1, 64, 512, 512, 1, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 1, 64, 512, 511, 1, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 64, 128, 64, 32, 1, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 63, 128, 64, 32, 1, 0));
	/* channels not a multiple of 64 from 4 Mi elements (s27-3): MobileNetV2's 32 over
	 * 28 x 28 and 96 over 14 x 14 without an activation, not 160 over 7 x 7; the bound
	 * exactly, one row or image fewer */
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 32, 28, 28, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 96, 14, 14, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 160, 7, 7, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 1, 16, 512, 512, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 1, 16, 512, 511, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 16, 32, 128, 64, 0, 0));
	CHECK(!bn16_own_wanted(BN16_AUTO, 15, 32, 128, 64, 0, 0));
	/* channels the kernels cannot take: never, in any mode */
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 12, 112, 112, 1, 0));
	CHECK(!bn16_own_wanted(BN16_OWN, 2, 12, 4, 4, 0, 0));
	/* own: every shape whose channels are a multiple of 8; cudnn: none */
	CHECK(bn16_own_wanted(BN16_OWN, 2, 64, 4, 4, 0, 0));
	CHECK(!bn16_own_wanted(BN16_CUDNN, 256, 32, 112, 112, 1, 0));
	/* a ReLU whose output nothing else keeps (ResNet's stem, 64 over 112x112): the own
	 * kernels free it, over the size bound only, never under cudnn */
	CHECK(!bn16_own_wanted(BN16_AUTO, 256, 64, 112, 112, 0, 0));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 64, 112, 112, 0, 1));
	CHECK(bn16_own_wanted(BN16_AUTO, 256, 128, 56, 56, 0, 1));
	CHECK(!bn16_own_wanted(BN16_AUTO, 4, 64, 112, 112, 0, 1));
	CHECK(!bn16_own_wanted(BN16_CUDNN, 256, 64, 112, 112, 0, 1));
}

TEST(bn16_switch_read_from_the_environment)
{
	static const char *const vals[] = { "cudnn", "auto", "own", "fast" };
	static const int want[] = { BN16_CUDNN, BN16_AUTO, BN16_OWN, BN16_AUTO };
	const char *was = getenv("GPUPERF_BN16");
	char *keep = was ? strdup(was) : NULL;
	for (int i = 0; i < 4; i++) {
		setenv("GPUPERF_BN16", vals[i], 1);
		tuning_reload();
		CHECK_EQ_INT(tuning_get()->bn16, want[i]);
	}
	unsetenv("GPUPERF_BN16");
	tuning_reload();
	CHECK_EQ_INT(tuning_get()->bn16, BN16_AUTO); /* the default since the eighteenth session */
	if (keep) /* the run's own setting back */
		setenv("GPUPERF_BN16", keep, 1);
	free(keep);
	tuning_reload();
}
