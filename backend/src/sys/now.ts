// A value now, or a promise of it: what a call returns that usually
// finishes on this thread but may have to wait (a CUDA call the addon ran
// inline, or one it handed to another thread). On a session's worker a
// short call's round trip is a few microseconds, and each promise step on
// its way (a promise made, settled and awaited, an async function's own)
// costs a fraction of one: so the request path passes a value on as it is
// and becomes asynchronous only where something really waits.

export type Now<T> = T | Promise<T>;

/** Whether x is still to come. */
export function later<T>(x: Now<T>): x is Promise<T> {
  return x instanceof Promise;
}

/** f of x: at once if x is here, else once it is. A throw of f (or of whatever made x) stays synchronous where x was. */
export function then<T, U>(x: Now<T>, f: (v: T) => Now<U>): Now<U> {
  return x instanceof Promise ? x.then(f) : f(x);
}
