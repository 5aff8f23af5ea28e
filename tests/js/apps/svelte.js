import { mount, unmount } from "svelte";
import Chat from "./Chat.svelte";
import { sessionId } from "./harness.js";

const app = mount(Chat, { target: document.getElementById("app"), props: { sessionId } });
window.t.unmount = () => unmount(app);
