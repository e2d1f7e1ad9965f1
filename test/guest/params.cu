// SPDX-License-Identifier: MIT
// params: kernel parameters of every shape cross intact: scalars of every
// width at odd alignments, structs by value (with arrays, nested, padded),
// pointers, a ~2 KB parameter block, the largest block CUDA 12.1+ allows
// (32,764 bytes), and no parameters at all.
#include "qctest.h"

struct Inner {
	char tag;
	double d;
	short s[3];
};

struct Mixed {
	char c;
	short s;
	int i;
	long long ll;
	float f;
	double d;
	int arr[5];
	Inner in;
	unsigned char flag;
};

struct Big {
	int v[500]; /* 2000 bytes */
	char tail[7];
};

__global__ void scalars(char a, double b, short c, unsigned long long *out, float d, long long e, char f,
			unsigned char g, double h)
{
	out[0] = (unsigned long long)(long long)a;
	out[1] = __double_as_longlong(b);
	out[2] = (unsigned long long)(long long)c;
	out[3] = __float_as_uint(d);
	out[4] = (unsigned long long)e;
	out[5] = (unsigned long long)(long long)f;
	out[6] = g;
	out[7] = __double_as_longlong(h);
}

__global__ void by_value(Mixed m, Mixed *out, int *p, char last)
{
	*out = m;
	out->flag = last;
	p[0] = m.arr[0] + m.arr[4];
}

__global__ void big_block(Big b, long long *out, int scale)
{
	long long sum = 0;
	for (int i = 0; i < 500; i++)
		sum += (long long)b.v[i] * (i + 1);
	for (int i = 0; i < 7; i++)
		sum += b.tail[i];
	*out = sum * scale;
}

/* With the pointer and the int after it: 32,764 bytes of parameters, the
 * most CUDA 12.1+ takes on Volta and later. */
struct Huge {
	int v[8188];
};

__global__ void huge_block(Huge h, long long *out, int scale)
{
	long long sum = 0;
	for (int i = 0; i < 8188; i++)
		sum += (long long)h.v[i] * (i % 97 + 1);
	*out = sum * scale;
}

__global__ void no_params(void)
{
}

int main(void)
{
	unsigned long long *d_u, h_u[8];
	Mixed m, *d_m, h_m;
	int *d_i, h_i;
	long long *d_ll, h_ll;
	Big *big = (Big *)malloc(sizeof(Big));

	qt_begin("params");
	EXPECT(cudaMalloc(&d_u, sizeof(h_u)), cudaSuccess);
	scalars<<<1, 1>>>((char)-5, 3.25, (short)-1234, d_u, 1.5f, -9000000000ll, 'z', 250, -0.125);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaMemcpy(h_u, d_u, sizeof(h_u), cudaMemcpyDeviceToHost), cudaSuccess);
	{
		double b, h;
		float d;
		unsigned int du = (unsigned int)h_u[3];
		memcpy(&b, &h_u[1], 8), memcpy(&h, &h_u[7], 8), memcpy(&d, &du, 4);
		qt_check((long long)h_u[0] == -5 && b == 3.25 && (long long)h_u[2] == -1234 && d == 1.5f &&
				 (long long)h_u[4] == -9000000000ll && h_u[5] == 'z' && h_u[6] == 250 && h == -0.125,
			 "char, double, short, pointer, float, long long, char, uchar, double");
	}

	memset(&m, 0, sizeof(m));
	m.c = 'q', m.s = -77, m.i = 123456789, m.ll = 0x123456789abcdefll, m.f = -2.5f, m.d = 1e300;
	for (int i = 0; i < 5; i++)
		m.arr[i] = i * i * 1000 - 3;
	m.in.tag = 'T', m.in.d = -3.75, m.in.s[0] = 1, m.in.s[1] = -2, m.in.s[2] = 3;
	m.flag = 1;
	EXPECT(cudaMalloc(&d_m, sizeof(Mixed)), cudaSuccess);
	EXPECT(cudaMalloc(&d_i, sizeof(int)), cudaSuccess);
	by_value<<<1, 1>>>(m, d_m, d_i, (char)200);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(&h_m, d_m, sizeof(h_m), cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaMemcpy(&h_i, d_i, sizeof(h_i), cudaMemcpyDeviceToHost), cudaSuccess);
	m.flag = (unsigned char)200;
	qt_check(h_m.c == m.c && h_m.s == m.s && h_m.i == m.i && h_m.ll == m.ll && h_m.f == m.f && h_m.d == m.d &&
			 !memcmp(h_m.arr, m.arr, sizeof(m.arr)) && h_m.in.tag == m.in.tag && h_m.in.d == m.in.d &&
			 !memcmp(h_m.in.s, m.in.s, sizeof(m.in.s)) && h_m.flag == 200,
		 "struct by value (%zu bytes, nested struct, arrays) comes back field by field", sizeof(Mixed));
	qt_check(h_i == m.arr[0] + m.arr[4], "pointer parameter after a struct");

	for (int i = 0; i < 500; i++)
		big->v[i] = (i * 37) % 101 - 50;
	for (int i = 0; i < 7; i++)
		big->tail[i] = (char)(i * 3 - 10);
	long long want = 0;
	for (int i = 0; i < 500; i++)
		want += (long long)big->v[i] * (i + 1);
	for (int i = 0; i < 7; i++)
		want += big->tail[i];
	EXPECT(cudaMalloc(&d_ll, sizeof(long long)), cudaSuccess);
	big_block<<<1, 1>>>(*big, d_ll, -3);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(&h_ll, d_ll, sizeof(h_ll), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h_ll == want * -3, "a %zu-byte struct parameter (+ pointer, int) arrives whole", sizeof(Big));

	/* Explicit cudaLaunchKernel with an args array. */
	int scale = 2;
	void *args[] = { big, &d_ll, &scale };
	EXPECT(cudaLaunchKernel((const void *)big_block, dim3(1), dim3(1), args, 0, 0), cudaSuccess);
	EXPECT(cudaMemcpy(&h_ll, d_ll, sizeof(h_ll), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h_ll == want * 2, "the same through cudaLaunchKernel(args[])");

	Huge *huge = (Huge *)malloc(sizeof(Huge));
	want = 0;
	for (int i = 0; i < 8188; i++) {
		huge->v[i] = (i * 7919) % 2003 - 1000;
		want += (long long)huge->v[i] * (i % 97 + 1);
	}
	huge_block<<<1, 1>>>(*huge, d_ll, 5);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(&h_ll, d_ll, sizeof(h_ll), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h_ll == want * 5, "%zu bytes of parameters (a %zu-byte struct, a pointer, an int) arrive whole",
		 sizeof(Huge) + 8 + 4, sizeof(Huge));
	void *hargs[] = { huge, &d_ll, &scale };
	EXPECT(cudaLaunchKernel((const void *)huge_block, dim3(1), dim3(1), hargs, 0, 0), cudaSuccess);
	EXPECT(cudaMemcpy(&h_ll, d_ll, sizeof(h_ll), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h_ll == want * 2, "the same through cudaLaunchKernel(args[])");
	free(huge);

	no_params<<<3, 7>>>();
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaLaunchKernel((const void *)no_params, dim3(1), dim3(1), NULL, 0, 0), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(d_u), cudaSuccess);
	EXPECT(cudaFree(d_m), cudaSuccess);
	EXPECT(cudaFree(d_i), cudaSuccess);
	EXPECT(cudaFree(d_ll), cudaSuccess);
	free(big);
	return qt_end();
}
