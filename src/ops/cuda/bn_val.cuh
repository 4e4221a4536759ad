/* The batch norm formulas the own kernels share. The 16-bit one for an element, in
 * float with every rounding explicit, so that no call site contracts it differently:
 * the apply pass (bn.cu's bn_apply_op, which makes the forward output and recomputes it
 * in backward) and the own NHWC kernels' backward (bn_nhwc16.cu, which recomputes the
 * activation's mask from x) then agree on every element bit for bit. And the batch
 * statistics from the sums. Includes nothing of ours. */
#ifndef GP_BN_VAL_CUH
#define GP_BN_VAL_CUH

/* xhat = (x - mean) * invstd */
__device__ static inline float bn16_xhat(float x, float m, float is)
{
	return __fmul_rn(__fsub_rn(x, m), is);
}

/* xhat * gamma + beta + id, before the activation */
__device__ static inline float bn16_pre(float x, float id, float m, float is, float g, float b)
{
	return __fadd_rn(__fmaf_rn(bn16_xhat(x, m, is), g, b), id);
}

/* The activation at pre-activation v: act 0 linear, else max(v, 0) capped at cap (6 for
 * ReLU6, infinity for ReLU). */
__device__ static inline float bn16_act(float v, int act, float cap)
{
	if (!act)
		return v;
	v = v > 0.0f ? v : 0.0f;
	return v > cap ? cap : v;
}

/* Channel ch's batch statistics from the sums of d = x - shift and d^2 over m elements,
 * as PyTorch keeps them: saved mean and 1 / sqrt(biased var + eps); the running variance
 * takes the unbiased one (the FP32 and the 16-bit own kernels' final step). */
__device__ static inline void bn_stats_write(size_t ch, double s1, double s2, double m, float shift, double eps,
					     double momentum, float *save_mean, float *save_invstd,
					     float *running_mean, float *running_var)
{
	double dm = s1 / m, var = s2 / m - dm * dm, mean = (double)shift + dm;
	if (var < 0.0)
		var = 0.0;
	save_mean[ch] = (float)mean;
	save_invstd[ch] = (float)(1.0 / sqrt(var + eps));
	running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
	running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * var * (m > 1.0 ? m / (m - 1.0) : 1.0));
}

#endif
