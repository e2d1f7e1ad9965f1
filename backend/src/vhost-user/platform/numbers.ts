// Limits of JavaScript numbers, declared once.

/** The largest integer a double holds exactly, as a bigint: a bigint from the wire above it cannot become a number without losing bits. */
export const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER);
