"use strict";
if (location.search.indexOf("failed=1") >= 0) {
  document.getElementById("failed").classList.remove("hidden");
}
