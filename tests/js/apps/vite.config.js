// One Vite build for the binding apps (React, Vue, Svelte) and the README's
// npm quickstart, against the packed package. Built in development mode:
// React's StrictMode then mounts every effect twice, which the test checks.
import { svelte } from "@sveltejs/vite-plugin-svelte";

export default {
  base: "./",
  logLevel: "warn",
  plugins: [svelte()],
  define: {
    __VUE_OPTIONS_API__: "false",
    __VUE_PROD_DEVTOOLS__: "false",
    __VUE_PROD_HYDRATION_MISMATCH_DETAILS__: "false",
  },
  build: {
    target: "es2022",
    rollupOptions: {
      input: ["react.html", "vue.html", "svelte.html", "quickstart.html"],
    },
  },
};
