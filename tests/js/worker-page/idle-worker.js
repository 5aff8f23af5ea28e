// A worker that never calls serve().
