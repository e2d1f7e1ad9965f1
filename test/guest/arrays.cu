// SPDX-License-Identifier: MIT
// arrays: pitched memory and 2D/3D copies (host <-> device, device <->
// device, memsets), CUDA arrays (2D, 3D, layered, cubemap) with copies in
// and out checked byte for byte, then on the GPU texture objects (point and
// linear filtering, normalized coordinates, pitch2D and linear resources)
// and a surface object written by a kernel, against values computed here.
#include "qctest.h"

/* cudaMemcpyToArray / FromArray are deprecated, and exercised here. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* ---------------------------------------------------------------- kernels */

// Each thread samples the texture at its pixel: point filtering at the
// texel's centre (unnormalized), linear filtering a quarter texel right of
// it (normalized coordinates).
__global__ void sample(cudaTextureObject_t point, cudaTextureObject_t linear, float *outp, float *outl, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;

	if (x >= w || y >= h)
		return;
	outp[y * w + x] = tex2D<float>(point, x + 0.5f, y + 0.5f);
	outl[y * w + x] = tex2D<float>(linear, (x + 0.75f) / w, (y + 0.5f) / h);
}

__global__ void fetch_linear(cudaTextureObject_t t, int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = tex1Dfetch<int>(t, i);
}

// Writes f(x, y) = 3x - y * 0.5 into a float surface.
__global__ void write_surface(cudaSurfaceObject_t s, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;

	if (x < w && y < h)
		surf2Dwrite(3.0f * x - y * 0.5f, s, x * (int)sizeof(float), y);
}

// Samples a mipmapped texture's centre at each level.
__global__ void read_lods(cudaTextureObject_t t, float *out, int levels)
{
	int l = threadIdx.x;

	if (l < levels)
		out[l] = tex2DLod<float>(t, 0.5f, 0.5f, (float)l);
}

// Reads a uchar4 layered texture's texel and sums its channels.
__global__ void read_layered(cudaTextureObject_t t, int *out, int w, int h, int layers)
{
	int x = threadIdx.x, y = blockIdx.x, l = blockIdx.y;

	if (x < w && y < h && l < layers) {
		uchar4 v = tex2DLayered<uchar4>(t, x + 0.5f, y + 0.5f, l);
		out[(l * h + y) * w + x] = v.x + v.y + v.z + v.w;
	}
}

/* ------------------------------------------------------------- host side */

static bool same_box(const unsigned char *a, size_t apitch, const unsigned char *b, size_t bpitch, size_t w, size_t h)
{
	for (size_t y = 0; y < h; y++)
		if (memcmp(a + y * apitch, b + y * bpitch, w))
			return false;
	return true;
}

static void pitched(void)
{
	const size_t w = 77 * sizeof(float), h = 50, hp = w + 40;
	size_t pitch = 0, pitch2 = 0;
	unsigned char *host = (unsigned char *)malloc(hp * h), *back = (unsigned char *)malloc(hp * h);
	unsigned char *d1 = NULL, *d2 = NULL;
	cudaStream_t s;

	printf("## pitched memory and 2D copies\n");
	qt_fill(host, hp * h, 1);
	EXPECT(cudaMallocPitch((void **)&d1, &pitch, w, h), cudaSuccess);
	EXPECT(cudaMallocPitch((void **)&d2, &pitch2, w, h), cudaSuccess);
	qt_check(pitch >= w && pitch % 32 == 0 && pitch2 == pitch, "cudaMallocPitch: pitch >= width, a multiple of 32");
	EXPECT(cudaMemcpy2D(d1, pitch, host, hp, w, h, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy2D(d2, pitch2, d1, pitch, w, h, cudaMemcpyDeviceToDevice), cudaSuccess);
	memset(back, 0xEE, hp * h);
	EXPECT(cudaMemcpy2D(back, hp, d2, pitch2, w, h, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(same_box(back, hp, host, hp, w, h), "2D round trip H2D, D2D, D2H: every byte");
	qt_check(qt_not_byte(back + w, 0xEE, hp - w) < 0, "2D copy leaves the host gaps alone");

	/* A sub-box with offsets, cudaMemcpyDefault. */
	memset(back, 0, hp * h);
	EXPECT(cudaMemcpy2D(back + 3, hp, d1 + 5 * pitch + 8, pitch, 100, 20, cudaMemcpyDefault), cudaSuccess);
	qt_check(same_box(back + 3, hp, host + 5 * hp + 8, hp, 100, 20), "2D sub-box at an offset, cudaMemcpyDefault");

	/* Memset2D of a box, read back whole. */
	EXPECT(cudaMemset2D(d1 + 2 * pitch + 16, pitch, 0x5C, 64, 10), cudaSuccess);
	EXPECT(cudaMemcpy2D(back, hp, d1, pitch, w, h, cudaMemcpyDeviceToHost), cudaSuccess);
	{
		bool ok = true;

		for (size_t y = 0; y < h; y++)
			for (size_t x = 0; x < w; x++) {
				bool in = y >= 2 && y < 12 && x >= 16 && x < 80;
				ok &= back[y * hp + x] == (in ? 0x5C : host[y * hp + x]);
			}
		qt_check(ok, "cudaMemset2D sets its box, nothing else");
	}

	/* Async on a stream. */
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	qt_fill(host, hp * h, 2);
	EXPECT(cudaMemcpy2DAsync(d2, pitch2, host, hp, w, h, cudaMemcpyHostToDevice, s), cudaSuccess);
	EXPECT(cudaMemset2DAsync(d2, pitch2, 0x11, 4, h, s), cudaSuccess);
	EXPECT(cudaMemcpy2DAsync(back, hp, d2, pitch2, w, h, cudaMemcpyDeviceToHost, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	{
		bool ok = true;

		for (size_t y = 0; y < h; y++)
			ok &= qt_not_byte(back + y * hp, 0x11, 4) < 0 &&
			      !memcmp(back + y * hp + 4, host + y * hp + 4, w - 4);
		qt_check(ok, "cudaMemcpy2DAsync and cudaMemset2DAsync in stream order");
	}
	EXPECT(cudaStreamDestroy(s), cudaSuccess);

	/* Bad pitches. */
	EXPECT(cudaMemcpy2D(back, 8, d1, pitch, 16, 2, cudaMemcpyDeviceToHost), cudaErrorInvalidPitchValue);
	EXPECT(cudaMemcpy2D(d1, 8, host, hp, 16, 2, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
	EXPECT(cudaFree(d1), cudaSuccess);
	EXPECT(cudaFree(d2), cudaSuccess);
	free(host);
	free(back);

	/* A tall narrow copy: 3000 rows of 12 bytes (one request in a qcuda guest). */
	{
		const size_t rows = 3000, rw = 12, shp = 40;
		unsigned char *a = (unsigned char *)malloc(rows * shp), *b = (unsigned char *)calloc(rows, shp);
		unsigned char *d;
		size_t dp;

		qt_fill(a, rows * shp, 3);
		EXPECT(cudaMallocPitch((void **)&d, &dp, rw, rows), cudaSuccess);
		EXPECT(cudaMemcpy2D(d, dp, a, shp, rw, rows, cudaMemcpyHostToDevice), cudaSuccess);
		EXPECT(cudaMemcpy2D(b, shp, d, dp, rw, rows, cudaMemcpyDeviceToHost), cudaSuccess);
		qt_check(same_box(a, shp, b, shp, rw, rows), "3000 rows of 12 bytes round trip");
		EXPECT(cudaFree(d), cudaSuccess);
		free(a);
		free(b);
	}

	/* A column of a wide host image (a sparse box) in and out. */
	{
		const size_t iw = 4096, rows = 600, cw = 16, cx = 1000;
		unsigned char *img = (unsigned char *)malloc(iw * rows), *img2 = (unsigned char *)malloc(iw * rows);
		unsigned char *d;
		size_t dp;
		bool ok = true;

		qt_fill(img, iw * rows, 7);
		memset(img2, 0x77, iw * rows);
		EXPECT(cudaMallocPitch((void **)&d, &dp, cw, rows), cudaSuccess);
		EXPECT(cudaMemcpy2D(d, dp, img + cx, iw, cw, rows, cudaMemcpyHostToDevice), cudaSuccess);
		EXPECT(cudaMemcpy2D(img2 + cx, iw, d, dp, cw, rows, cudaMemcpyDeviceToHost), cudaSuccess);
		for (size_t y = 0; y < rows; y++)
			for (size_t x = 0; x < iw; x++)
				ok &= img2[y * iw + x] == (x >= cx && x < cx + cw ? img[y * iw + x] : 0x77);
		qt_check(ok, "a 16-byte column of a 4096-byte-wide image, in and out: its bytes and nothing else");
		EXPECT(cudaFree(d), cudaSuccess);
		free(img);
		free(img2);
	}

	/* cudaMalloc3D, cudaMemset3D and cudaMemcpy3D between pitched memory and the host. */
	{
		const size_t W = 50, H = 9, D = 4;
		struct cudaPitchedPtr p;
		struct cudaExtent e = make_cudaExtent(W, H, D);
		unsigned char *a = (unsigned char *)malloc(W * H * D), *b = (unsigned char *)malloc(W * H * D);
		struct cudaMemcpy3DParms cp = {};

		EXPECT(cudaMalloc3D(&p, e), cudaSuccess);
		qt_check(p.pitch >= W && p.xsize == W && p.ysize == H, "cudaMalloc3D: pitch, xsize, ysize");
		EXPECT(cudaMemset3D(p, 0x42, e), cudaSuccess);
		cp.srcPtr = p;
		cp.dstPtr = make_cudaPitchedPtr(b, W, W, H);
		cp.extent = e;
		cp.kind = cudaMemcpyDeviceToHost;
		EXPECT(cudaMemcpy3D(&cp), cudaSuccess);
		qt_check(qt_not_byte(b, 0x42, W * H * D) < 0, "cudaMemset3D sets every byte");
		qt_fill(a, W * H * D, 4);
		cp = {};
		cp.srcPtr = make_cudaPitchedPtr(a, W, W, H);
		cp.dstPtr = p;
		cp.extent = e;
		cp.kind = cudaMemcpyHostToDevice;
		EXPECT(cudaMemcpy3D(&cp), cudaSuccess);
		memset(b, 0, W * H * D);
		cp = {};
		cp.srcPtr = p;
		cp.dstPtr = make_cudaPitchedPtr(b, W, W, H);
		cp.extent = e;
		cp.kind = cudaMemcpyDeviceToHost;
		EXPECT(cudaMemcpy3D(&cp), cudaSuccess);
		qt_check(qt_diff(a, b, W * H * D) < 0, "cudaMemcpy3D pitched round trip: every byte");
		EXPECT(cudaFree(p.ptr), cudaSuccess);
		free(a);
		free(b);
	}
}

static cudaArray_t arr2d, arr_surf, arr_layered;
static cudaMipmappedArray_t mip;
static const int MW = 16, ML = 5;
static const int TW = 16, TH = 8, LW = 8, LH = 4, LL = 3;
static float texels[8][16];

static void arrays(void)
{
	cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
	cudaChannelFormatDesc u4 = cudaCreateChannelDesc<uchar4>();
	cudaChannelFormatDesc got;
	cudaExtent ext;
	unsigned int flags = 99;

	printf("## arrays\n");
	/* 2D float array. */
	EXPECT(cudaMallocArray(&arr2d, &f, TW, TH), cudaSuccess);
	EXPECT(cudaArrayGetInfo(&got, &ext, &flags, arr2d), cudaSuccess);
	qt_check(got.x == 32 && got.y == 0 && got.f == cudaChannelFormatKindFloat && ext.width == TW &&
			 ext.height == TH && ext.depth == 0 && flags == 0,
		 "cudaArrayGetInfo: float, %dx%d, depth 0, flags 0", TW, TH);
	for (int y = 0; y < TH; y++)
		for (int x = 0; x < TW; x++)
			texels[y][x] = x + 100.0f * y;
	EXPECT(cudaMemcpy2DToArray(arr2d, 0, 0, texels, sizeof(texels[0]), sizeof(texels[0]), TH,
				   cudaMemcpyHostToDevice),
	       cudaSuccess);
	{
		float sub[3][5];

		EXPECT(cudaMemcpy2DFromArray(sub, sizeof(sub[0]), arr2d, 4 * sizeof(float), 2, sizeof(sub[0]), 3,
					     cudaMemcpyDeviceToHost),
		       cudaSuccess);
		bool ok = true;
		for (int y = 0; y < 3; y++)
			for (int x = 0; x < 5; x++)
				ok &= sub[y][x] == texels[y + 2][x + 4];
		qt_check(ok, "cudaMemcpy2DFromArray of a sub-box");
	}
	EXPECT(cudaMemcpy2DToArray(arr2d, 8 * sizeof(float), 0, texels, sizeof(texels[0]), sizeof(texels[0]), 1,
				   cudaMemcpyHostToDevice),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemcpy2DToArray(arr2d, 0, 1, texels, sizeof(texels[0]), sizeof(texels[0]), TH,
				   cudaMemcpyHostToDevice),
	       cudaErrorInvalidValue);

	/* The deprecated row-order copies and array to array. */
	{
		cudaArray_t b;
		float row[40], back[TH][TW];

		for (int i = 0; i < 40; i++)
			row[i] = -1.0f - i;
		EXPECT(cudaMallocArray(&b, &f, TW, TH), cudaSuccess);
		EXPECT(cudaMemcpy2DArrayToArray(b, 0, 0, arr2d, 0, 0, sizeof(texels[0]), TH, cudaMemcpyDeviceToDevice),
		       cudaSuccess);
		EXPECT(cudaMemcpyToArray(b, 3 * sizeof(float), 1, row, sizeof(row), cudaMemcpyHostToDevice),
		       cudaSuccess);
		EXPECT(cudaMemcpy2DFromArray(back, sizeof(back[0]), b, 0, 0, sizeof(back[0]), TH,
					     cudaMemcpyDeviceToHost),
		       cudaSuccess);
		bool ok = true;
		for (int y = 0; y < TH; y++)
			for (int x = 0; x < TW; x++) {
				int i = (y * TW + x) - (1 * TW + 3);
				ok &= back[y][x] == (i >= 0 && i < 40 ? row[i] : texels[y][x]);
			}
		qt_check(ok, "cudaMemcpy2DArrayToArray, then cudaMemcpyToArray across rows");
		float out[40];
		EXPECT(cudaMemcpyFromArray(out, b, 3 * sizeof(float), 1, sizeof(out), cudaMemcpyDeviceToHost),
		       cudaSuccess);
		qt_check(!memcmp(out, row, sizeof(out)), "cudaMemcpyFromArray across rows");
		EXPECT(cudaFreeArray(b), cudaSuccess);
	}

	/* 3D uchar4 array: a host box in, sub-boxes out with cudaMemcpy3D. */
	{
		const int W = 20, H = 12, D = 6;
		cudaArray_t a3;
		unsigned char *h = (unsigned char *)malloc(W * H * D * 4), *o = (unsigned char *)calloc(W * H * D, 4);
		cudaMemcpy3DParms p = {};

		qt_fill(h, W * H * D * 4, 5);
		EXPECT(cudaMalloc3DArray(&a3, &u4, make_cudaExtent(W, H, D)), cudaSuccess);
		EXPECT(cudaArrayGetInfo(&got, &ext, &flags, a3), cudaSuccess);
		qt_check(got.x == 8 && got.w == 8 && got.f == cudaChannelFormatKindUnsigned && ext.width == W &&
				 ext.height == H && ext.depth == D,
			 "3D array info: uchar4, %dx%dx%d", W, H, D);
		p.srcPtr = make_cudaPitchedPtr(h, W * 4, W, H);
		p.dstArray = a3;
		p.extent = make_cudaExtent(W, H, D);
		p.kind = cudaMemcpyHostToDevice;
		EXPECT(cudaMemcpy3D(&p), cudaSuccess);
		p = {};
		p.srcArray = a3;
		p.srcPos = make_cudaPos(2, 3, 1);
		p.dstPtr = make_cudaPitchedPtr(o, 7 * 4, 7, 5);
		p.extent = make_cudaExtent(7, 5, 4);
		p.kind = cudaMemcpyDeviceToHost;
		EXPECT(cudaMemcpy3D(&p), cudaSuccess);
		bool ok = true;
		for (int z = 0; z < 4; z++)
			for (int y = 0; y < 5; y++)
				ok &= !memcmp(o + ((z * 5 + y) * 7) * 4, h + (((z + 1) * H + y + 3) * W + 2) * 4,
					      7 * 4);
		qt_check(ok, "cudaMemcpy3D array sub-box (2,3,1) 7x5x4: every byte");
		p.extent = make_cudaExtent(7, 5, 6);
		EXPECT(cudaMemcpy3D(&p), cudaErrorInvalidValue);
		/* The whole array back through a device pitched buffer (cudaMemcpy3DAsync). */
		struct cudaPitchedPtr dp;
		EXPECT(cudaMalloc3D(&dp, make_cudaExtent(W * 4, H, D)), cudaSuccess);
		p = {};
		p.srcArray = a3;
		p.dstPtr = dp;
		p.extent = make_cudaExtent(W, H, D);
		p.kind = cudaMemcpyDeviceToDevice;
		EXPECT(cudaMemcpy3DAsync(&p, 0), cudaSuccess);
		p = {};
		p.srcPtr = dp;
		p.dstPtr = make_cudaPitchedPtr(o, W * 4, W * 4, H);
		p.extent = make_cudaExtent(W * 4, H, D);
		p.kind = cudaMemcpyDeviceToHost;
		EXPECT(cudaMemcpy3D(&p), cudaSuccess);
		qt_check(qt_diff(o, h, W * H * D * 4) < 0, "3D array -> pitched device memory -> host: every byte");
		EXPECT(cudaFree(dp.ptr), cudaSuccess);
		EXPECT(cudaFreeArray(a3), cudaSuccess);
		free(h);
		free(o);
	}

	/* Layered uchar4: one layer at a time in, all layers out. */
	{
		unsigned char layer[LH][LW][4], all[LL][LH][LW][4];
		cudaMemcpy3DParms p = {};

		EXPECT(cudaMalloc3DArray(&arr_layered, &u4, make_cudaExtent(LW, LH, LL), cudaArrayLayered),
		       cudaSuccess);
		EXPECT(cudaArrayGetInfo(&got, &ext, &flags, arr_layered), cudaSuccess);
		qt_check(flags == cudaArrayLayered && ext.depth == LL, "layered array info: flags, %d layers", LL);
		for (int l = 0; l < LL; l++) {
			for (int y = 0; y < LH; y++)
				for (int x = 0; x < LW; x++)
					for (int c = 0; c < 4; c++)
						layer[y][x][c] = (unsigned char)(l * 50 + y * 10 + x + c);
			p = {};
			p.srcPtr = make_cudaPitchedPtr(layer, sizeof(layer[0]), LW, LH);
			p.dstArray = arr_layered;
			p.dstPos = make_cudaPos(0, 0, l);
			p.extent = make_cudaExtent(LW, LH, 1);
			p.kind = cudaMemcpyHostToDevice;
			OK(cudaMemcpy3D(&p));
		}
		p = {};
		p.srcArray = arr_layered;
		p.dstPtr = make_cudaPitchedPtr(all, sizeof(all[0][0]), LW, LH);
		p.extent = make_cudaExtent(LW, LH, LL);
		p.kind = cudaMemcpyDeviceToHost;
		EXPECT(cudaMemcpy3D(&p), cudaSuccess);
		bool ok = true;
		for (int l = 0; l < LL; l++)
			for (int y = 0; y < LH; y++)
				for (int x = 0; x < LW; x++)
					for (int c = 0; c < 4; c++)
						ok &= all[l][y][x][c] == (unsigned char)(l * 50 + y * 10 + x + c);
		qt_check(ok, "layered array: %d layers in one at a time, out together", LL);
	}

	/* A float4 array of more than 16 MiB (several requests in a qcuda guest), in and out whole. */
	{
		const size_t W = 1024, H = 1100, rowb = W * 16;
		cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
		unsigned char *h = (unsigned char *)malloc(rowb * H), *o = (unsigned char *)malloc(rowb * H);
		cudaArray_t big;

		qt_fill(h, rowb * H, 6);
		memset(o, 0, rowb * H);
		EXPECT(cudaMallocArray(&big, &f4, W, H), cudaSuccess);
		EXPECT(cudaMemcpy2DToArray(big, 0, 0, h, rowb, rowb, H, cudaMemcpyHostToDevice), cudaSuccess);
		EXPECT(cudaMemcpy2DFromArray(o, rowb, big, 0, 0, rowb, H, cudaMemcpyDeviceToHost), cudaSuccess);
		qt_check(qt_diff(h, o, rowb * H) < 0, "a 17 MiB float4 array round trip: every byte");
		EXPECT(cudaFreeArray(big), cudaSuccess);
		free(h);
		free(o);
	}

	/* A mipmapped float array: each level an array of its own size, filled with its own value. */
	{
		bool ok = true;

		EXPECT(cudaMallocMipmappedArray(&mip, &f, make_cudaExtent(MW, MW, 0), ML), cudaSuccess);
		for (int l = 0; l < ML; l++) {
			cudaArray_t lv, again;
			int w = MW >> l;
			float vals[16 * 16];

			OK(cudaGetMipmappedArrayLevel(&lv, mip, l));
			OK(cudaGetMipmappedArrayLevel(&again, mip, l));
			OK(cudaArrayGetInfo(&got, &ext, &flags, lv));
			ok &= again == lv && ext.width == (size_t)w && ext.height == (size_t)w;
			for (int i = 0; i < w * w; i++)
				vals[i] = (l + 1) * 10.0f;
			OK(cudaMemcpy2DToArray(lv, 0, 0, vals, w * sizeof(float), w * sizeof(float), w,
					       cudaMemcpyHostToDevice));
			EXPECT(cudaMemcpy2DToArray(lv, 0, 0, vals, w * sizeof(float), w * sizeof(float), w + 1,
						   cudaMemcpyHostToDevice),
			       cudaErrorInvalidValue);
		}
		qt_check(ok, "mipmapped array: %d levels, each its size (the same array each time it is asked for)",
			 ML);
		cudaArray_t l3;
		float v[4];
		OK(cudaGetMipmappedArrayLevel(&l3, mip, 3));
		EXPECT(cudaMemcpy2DFromArray(v, 2 * sizeof(float), l3, 0, 0, 2 * sizeof(float), 2,
					     cudaMemcpyDeviceToHost),
		       cudaSuccess);
		qt_check(v[0] == 40.0f && v[3] == 40.0f, "level 3 reads back its values");
		cudaArray_t none;
		EXPECT(cudaGetMipmappedArrayLevel(&none, mip, ML), cudaErrorInvalidValue);
	}

	/* A cubemap and a surface-capable array. */
	{
		cudaArray_t cube;

		EXPECT(cudaMalloc3DArray(&cube, &f, make_cudaExtent(8, 8, 6), cudaArrayCubemap), cudaSuccess);
		EXPECT(cudaArrayGetInfo(&got, &ext, &flags, cube), cudaSuccess);
		qt_check(flags == cudaArrayCubemap && ext.width == 8 && ext.depth == 6, "cubemap array info");
		EXPECT(cudaFreeArray(cube), cudaSuccess);
		EXPECT(cudaMalloc3DArray(&arr_surf, &f, make_cudaExtent(TW, TH, 0), cudaArraySurfaceLoadStore),
		       cudaSuccess);
	}
}

static void textures(void)
{
	cudaTextureObject_t tp = 0, tl = 0, tlin = 0, tlay = 0;
	cudaSurfaceObject_t so = 0;
	cudaResourceDesc rd = {}, got = {};
	cudaTextureDesc td = {};
	float *outp, *outl;
	int *dints, *dout;
	const int N = 64;

	printf("## texture and surface objects\n");
	rd.resType = cudaResourceTypeArray;
	rd.res.array.array = arr2d;
	td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
	td.filterMode = cudaFilterModePoint;
	td.readMode = cudaReadModeElementType;
	EXPECT(cudaCreateTextureObject(&tp, &rd, &td, NULL), cudaSuccess);
	td.filterMode = cudaFilterModeLinear;
	td.normalizedCoords = 1;
	EXPECT(cudaCreateTextureObject(&tl, &rd, &td, NULL), cudaSuccess);
	EXPECT(cudaGetTextureObjectResourceDesc(&got, tl), cudaSuccess);
	qt_check(got.resType == cudaResourceTypeArray && got.res.array.array == arr2d,
		 "cudaGetTextureObjectResourceDesc names the array");

	/* A linear int texture. */
	int ints[N];
	for (int i = 0; i < N; i++)
		ints[i] = i * i - 7;
	EXPECT(cudaMalloc(&dints, sizeof(ints)), cudaSuccess);
	EXPECT(cudaMemcpy(dints, ints, sizeof(ints), cudaMemcpyHostToDevice), cudaSuccess);
	rd = {};
	rd.resType = cudaResourceTypeLinear;
	rd.res.linear.devPtr = dints;
	rd.res.linear.desc = cudaCreateChannelDesc<int>();
	rd.res.linear.sizeInBytes = sizeof(ints);
	td = {};
	td.readMode = cudaReadModeElementType;
	EXPECT(cudaCreateTextureObject(&tlin, &rd, &td, NULL), cudaSuccess);

	/* The layered array. */
	rd = {};
	rd.resType = cudaResourceTypeArray;
	rd.res.array.array = arr_layered;
	td = {};
	td.readMode = cudaReadModeElementType;
	EXPECT(cudaCreateTextureObject(&tlay, &rd, &td, NULL), cudaSuccess);

	/* A surface of the surface array. */
	rd.res.array.array = arr_surf;
	EXPECT(cudaCreateSurfaceObject(&so, &rd), cudaSuccess);
	/* Of an array made without cudaArraySurfaceLoadStore: CUDA 13 makes it too. */
	rd.res.array.array = arr2d;
	cudaSurfaceObject_t plain = 0;
	EXPECT(cudaCreateSurfaceObject(&plain, &rd), cudaSuccess);
	EXPECT(cudaDestroySurfaceObject(plain), cudaSuccess);

	/* The mipmapped array, point-sampled per level. */
	cudaTextureObject_t tmip = 0;
	rd = {};
	rd.resType = cudaResourceTypeMipmappedArray;
	rd.res.mipmap.mipmap = mip;
	td = {};
	td.normalizedCoords = 1;
	td.filterMode = cudaFilterModePoint;
	td.mipmapFilterMode = cudaFilterModePoint;
	td.maxMipmapLevelClamp = ML - 1;
	td.readMode = cudaReadModeElementType;
	EXPECT(cudaCreateTextureObject(&tmip, &rd, &td, NULL), cudaSuccess);

	EXPECT(cudaMalloc(&outp, TW * TH * sizeof(float)), cudaSuccess);
	EXPECT(cudaMalloc(&outl, TW * TH * sizeof(float)), cudaSuccess);
	EXPECT(cudaMalloc(&dout, LW * LH * LL * sizeof(int)), cudaSuccess);
	cudaGetLastError(); /* the refusals checked above set it */

	sample<<<dim3(1, 1), dim3(TW, TH)>>>(tp, tl, outp, outl, TW, TH);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		float p[TH][TW], l[TH][TW];
		bool okp = true, okl = true;

		EXPECT(cudaMemcpy(p, outp, sizeof(p), cudaMemcpyDeviceToHost), cudaSuccess);
		EXPECT(cudaMemcpy(l, outl, sizeof(l), cudaMemcpyDeviceToHost), cudaSuccess);
		for (int y = 0; y < TH; y++)
			for (int x = 0; x < TW; x++) {
				float next = texels[y][x < TW - 1 ? x + 1 : x]; /* clamped at the edge */
				float want = texels[y][x] + 0.25f * (next - texels[y][x]);
				okp &= p[y][x] == texels[y][x];
				okl &= fabsf(l[y][x] - want) <= 1e-2f;
			}
		qt_check(okp, "tex2D point filtering returns every texel exactly");
		qt_check(okl, "tex2D linear filtering, normalized coordinates: a quarter of the way to the next texel");
	}
	fetch_linear<<<1, N>>>(tlin, dout, N);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		int o[N];

		EXPECT(cudaMemcpy(o, dout, sizeof(o), cudaMemcpyDeviceToHost), cudaSuccess);
		qt_check(!memcmp(o, ints, sizeof(o)), "tex1Dfetch of a linear int texture");
	}
	read_layered<<<dim3(LH, LL), LW>>>(tlay, dout, LW, LH, LL);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		int o[LL][LH][LW];
		bool ok = true;

		EXPECT(cudaMemcpy(o, dout, sizeof(o), cudaMemcpyDeviceToHost), cudaSuccess);
		for (int l = 0; l < LL; l++)
			for (int y = 0; y < LH; y++)
				for (int x = 0; x < LW; x++)
					ok &= o[l][y][x] == 4 * (l * 50 + y * 10 + x) + 6;
		qt_check(ok, "tex2DLayered reads every layer");
	}
	read_lods<<<1, ML>>>(tmip, outp, ML);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		float o[ML];
		bool ok = true;

		EXPECT(cudaMemcpy(o, outp, sizeof(o), cudaMemcpyDeviceToHost), cudaSuccess);
		for (int l = 0; l < ML; l++)
			ok &= o[l] == (l + 1) * 10.0f;
		qt_check(ok, "tex2DLod reads each level of the mipmapped array");
	}
	write_surface<<<dim3(1, 1), dim3(TW, TH)>>>(so, TW, TH);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		float o[TH][TW];
		bool ok = true;

		EXPECT(cudaMemcpy2DFromArray(o, sizeof(o[0]), arr_surf, 0, 0, sizeof(o[0]), TH, cudaMemcpyDeviceToHost),
		       cudaSuccess);
		for (int y = 0; y < TH; y++)
			for (int x = 0; x < TW; x++)
				ok &= o[y][x] == 3.0f * x - y * 0.5f;
		qt_check(ok, "surf2Dwrite from a kernel, read back from the array");
	}
	EXPECT(cudaDestroyTextureObject(tp), cudaSuccess);
	EXPECT(cudaDestroyTextureObject(tl), cudaSuccess);
	EXPECT(cudaDestroyTextureObject(tlin), cudaSuccess);
	EXPECT(cudaDestroyTextureObject(tlay), cudaSuccess);
	EXPECT(cudaDestroyTextureObject(tmip), cudaSuccess);
	EXPECT(cudaDestroySurfaceObject(so), cudaSuccess);
	EXPECT(cudaFreeMipmappedArray(mip), cudaSuccess);
	EXPECT(cudaFree(outp), cudaSuccess);
	EXPECT(cudaFree(outl), cudaSuccess);
	EXPECT(cudaFree(dout), cudaSuccess);
	EXPECT(cudaFree(dints), cudaSuccess);
	EXPECT(cudaFreeArray(arr2d), cudaSuccess);
	EXPECT(cudaFreeArray(arr_surf), cudaSuccess);
	EXPECT(cudaFreeArray(arr_layered), cudaSuccess);
}

int main(void)
{
	qt_begin("arrays");
	pitched();
	arrays();
	textures();
	return qt_end();
}
